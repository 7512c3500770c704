"""Per-call cost of a log call in a training process, ours beside the peers.

Cases, all on the same messages, each timed in interleaved rounds (A B C D, A B C D, ...)
so a noisy neighbour hurts every case alike; the median round is reported:

- ``nvrx``: our ``"nvrx"`` logger as ``setup_logger`` leaves it (spool mode, lean path);
- ``nvrx+filter``: the same with a user filter added (the full stdlib path);
- ``filehandler``: stdlib ``FileHandler`` with NVRx's line format;
- ``otel``: the OTel SDK ``LoggingHandler`` with ``BatchLogRecordProcessor`` and an
  exporter that discards;
- ``loguru``: loguru's file sink with ``enqueue=True``;
- disabled calls: ours vs a stdlib logger.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROUNDS = 7


def _time_calls(call: Callable[[int], None], n: int) -> float:
    start = time.perf_counter_ns()
    for i in range(n):
        call(i)
    return (time.perf_counter_ns() - start) / n


def _nvrx(workdir: Path) -> tuple[Callable[[int], None], Callable[[], None], logging.Logger]:
    from nvrx_otel.logging import setup_logger

    # No aggregator consumes this spool: lift the per-process budget so every call is
    # really written (past the budget, calls would take the cheaper drop path).
    os.environ["NVRX_OTEL_SPOOL_BUDGET_MB"] = "1000000"
    log = setup_logger(node_local_tmp_dir=str(workdir / "spool"), force_reset=True)

    def call(i: int) -> None:
        log.info("iteration %d loss %.4f lr %s", i, 0.25, "3e-4")

    return call, lambda: None, log


def _filehandler(workdir: Path) -> tuple[Callable[[int], None], Callable[[], None]]:
    log = logging.getLogger("bench.filehandler")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(workdir / "filehandler.log")
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s [%(levelname)s] [node] [workload:0(0) infra:0(0)] "
            "%(filename)s:%(lineno)d %(message)s"
        )
    )
    log.addHandler(handler)

    def call(i: int) -> None:
        log.info("iteration %d loss %.4f lr %s", i, 0.25, "3e-4")

    return call, handler.close


def _otel(workdir: Path) -> tuple[Callable[[int], None], Callable[[], None]]:
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import (
        BatchLogRecordProcessor,
        LogRecordExporter,
        LogRecordExportResult,
    )

    class Discard(LogRecordExporter):
        def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
            return LogRecordExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    provider = LoggerProvider()
    provider.add_log_record_processor(BatchLogRecordProcessor(Discard()))
    log = logging.getLogger("bench.otel")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(LoggingHandler(logger_provider=provider))

    def call(i: int) -> None:
        log.info("iteration %d loss %.4f lr %s", i, 0.25, "3e-4")

    return call, provider.shutdown


def _loguru(workdir: Path) -> tuple[Callable[[int], None], Callable[[], None]]:
    from loguru import logger

    logger.remove()
    logger.add(
        workdir / "loguru.log",
        enqueue=True,
        level="INFO",
        format=(
            "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} | {message}"
        ),
    )

    def call(i: int) -> None:
        logger.info("iteration {} loss {:.4f} lr {}", i, 0.25, "3e-4")

    def close() -> None:
        logger.complete()
        logger.remove()

    return call, close


def run(calls: int = 50_000, rounds: int = ROUNDS) -> dict[str, Any]:
    """Time every case; returns ns per call (median of rounds) and the ratios."""
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-") as tmp:
        workdir = Path(tmp)
        nvrx_call, _, nvrx_log = _nvrx(workdir)
        fh_call, fh_close = _filehandler(workdir)
        otel_call, otel_close = _otel(workdir)
        loguru_call, loguru_close = _loguru(workdir)

        def filtered(i: int) -> None:
            nvrx_log.info("iteration %d loss %.4f lr %s", i, 0.25, "3e-4")

        stdlib_off = logging.getLogger("bench.disabled")
        stdlib_off.setLevel(logging.INFO)
        stdlib_off.addHandler(logging.NullHandler())
        stdlib_off.propagate = False

        def nvrx_disabled(i: int) -> None:
            nvrx_log.debug("iteration %d loss %.4f lr %s", i, 0.25, "3e-4")

        def stdlib_disabled(i: int) -> None:
            stdlib_off.debug("iteration %d loss %.4f lr %s", i, 0.25, "3e-4")

        def keep_all(record: logging.LogRecord) -> bool:
            return True

        samples: dict[str, list[float]] = {}
        for _ in range(rounds):
            for name, call, n in (
                ("nvrx", nvrx_call, calls),
                ("filehandler", fh_call, calls),
                ("otel", otel_call, calls),
                ("loguru", loguru_call, calls),
                ("nvrx_disabled", nvrx_disabled, calls * 4),
                ("stdlib_disabled", stdlib_disabled, calls * 4),
            ):
                samples.setdefault(name, []).append(_time_calls(call, n))
            nvrx_log.addFilter(keep_all)
            samples.setdefault("nvrx+filter", []).append(_time_calls(filtered, calls))
            nvrx_log.removeFilter(keep_all)
            time.sleep(0.2)  # let background exporters/queues drain outside the timed part
        fh_close()
        otel_close()
        loguru_close()
        spooled = sum(
            p.read_bytes().count(b'"k":"log"') for p in (workdir / "spool").rglob("*.jsonl")
        )
    expected = rounds * calls * 2  # nvrx and nvrx+filter calls, all written, none dropped
    if spooled < expected:
        raise RuntimeError(f"only {spooled} of {expected} records reached the spool")
    ns = {k: statistics.median(v) for k, v in samples.items()}
    fh = ns["filehandler"]
    return {
        "ns_per_call": ns,
        "ratios": {
            "nvrx/filehandler": ns["nvrx"] / fh,
            "nvrx+filter/filehandler": ns["nvrx+filter"] / fh,
            "otel/filehandler": ns["otel"] / fh,
            "loguru/filehandler": ns["loguru"] / fh,
            "nvrx_disabled/stdlib_disabled": ns["nvrx_disabled"] / ns["stdlib_disabled"],
        },
        "targets": {
            "nvrx/filehandler": 0.3,
            "nvrx+filter/filehandler": 0.8,
            "nvrx_disabled/stdlib_disabled": 1.1,
        },
        "calls_per_round": calls,
        "rounds": rounds,
    }
