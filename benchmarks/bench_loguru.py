"""Per-call cost of the loguru front end (LogFlow API) beside plain loguru.

loguru has one global logger, so each case is set up afresh before its timed block; the
cases run in interleaved rounds of short blocks (A B C ..., A B C ..., ...); times are the
median round, ratios the median of the per-round ratios:

- ``plain_file``: plain loguru, one file sink in LogFlow's line format (LogFlow's default,
  ``enqueue=False``), logging through ``logger.bind(name=...)`` as LogFlow's ``get_logger``;
  the same line our run file writes, so the ratio is what the front end adds;
- ``plain_file_default``: ``logger.add(file)`` with loguru's default format, for reference
  (what a loguru user has without any front end: the same work, `` - `` before the message);
- ``bridge``: ``configure_logging`` with a node-local spool: the run file in LogFlow's
  format plus the spool bridge (and a console sink that takes only CRITICAL, as on a quiet
  rank 0);
- ``run_file``: ``configure_logging`` without a spool: the run file alone;
- ``plain_file_enqueue`` / ``bridge_enqueue``: the same two with ``enqueue=True`` (loguru's
  pipe to a writer thread vs our in-process queue, see ``logflow.queued``);
- disabled calls (DEBUG under a global INFO): ``plain_disabled`` (plain loguru), ``ours_disabled``
  (no ``module_levels``), ``ours_disabled_raise`` (rules that only raise levels),
  ``ours_disabled_lower`` (a rule that lowers one module to DEBUG: the module-level gate),
  and ``logflow_disabled_lower``, LogFlow's way of doing the latter (the sink lowered to
  DEBUG and a filter per record), for reference.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROUNDS = 21
LOGFLOW_FORMAT = (
    "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} | {message}"
)


def _time_calls(call: Callable[[int], None], n: int) -> float:
    start = time.perf_counter_ns()
    for i in range(n):
        call(i)
    return (time.perf_counter_ns() - start) / n


def _info(log: Any) -> Callable[[int], None]:
    def call(i: int) -> None:
        log.info("iteration {} loss {:.4f} lr {}", i, 0.25, "3e-4")

    return call


def _debug(log: Any) -> Callable[[int], None]:
    def call(i: int) -> None:
        log.debug("iteration {} loss {:.4f} lr {}", i, 0.25, "3e-4")

    return call


def _plain(
    workdir: Path, *, enqueue: bool = False, lower: bool = False, default: bool = False
) -> Any:
    from loguru import logger

    from nvrx_otel.logging.logflow import reset_logging

    reset_logging()
    logger.remove()
    if default:  # loguru's default format and options
        logger.add(workdir / "default.log", level="INFO")
    elif lower:  # LogFlow's module_levels: the sink at the lowest rule level, a filter decides
        cache: dict[Any, int] = {}

        def keep(record: Any) -> bool:
            name = record["name"]
            threshold = cache.get(name)
            if threshold is None:
                threshold = cache[name] = 10 if str(name).startswith("noisy.lib") else 20
            return bool(record["level"].no >= threshold)

        logger.add(workdir / "plain.log", level="DEBUG", format=LOGFLOW_FORMAT, filter=keep)
    else:
        logger.add(workdir / "plain.log", level="INFO", format=LOGFLOW_FORMAT, enqueue=enqueue)
    return logger.bind(name=__name__)  # what LogFlow's get_logger(__name__) returns


def _ours(workdir: Path, *, enqueue: bool = False, rules: Any = None, spool: bool = True) -> Any:
    from nvrx_otel.logging.logflow import configure_logging, get_logger, reset_logging

    reset_logging()
    saved = None if spool else os.environ.pop("NVRX_NODE_LOCAL_TMPDIR", None)
    try:
        configure_logging(
            log_dir=workdir / "logs",
            script_name="bench",
            file_level="INFO",
            console_level="CRITICAL",
            rotation_on_startup=False,
            enqueue=enqueue,
            module_levels=rules,
            force=True,
        )
    finally:
        if saved is not None:
            os.environ["NVRX_NODE_LOCAL_TMPDIR"] = saved
    return get_logger(__name__)


def run(calls: int = 2_000, rounds: int = ROUNDS) -> dict[str, Any]:
    """Time every case; returns ns per call (median of rounds) and the ratios (median of
    the per-round ratios: each round's cases ran back to back, under the same load)."""
    from loguru import logger

    from nvrx_otel.logging.logflow import reset_logging

    saved = os.environ.get("NVRX_NODE_LOCAL_TMPDIR")
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-loguru-") as tmp:
        workdir = Path(tmp)
        os.environ["NVRX_NODE_LOCAL_TMPDIR"] = str(workdir / "spool")
        raise_rules = {"some.other.pkg": {"file": "WARNING", "console": "ERROR"}}
        lower_rules = {"noisy.lib": {"file": "DEBUG"}}
        cases: list[tuple[str, Callable[[], Callable[[int], None]], int]] = [
            ("plain_file", lambda: _info(_plain(workdir)), calls),
            ("plain_file_default", lambda: _info(_plain(workdir, default=True)), calls),
            ("bridge", lambda: _info(_ours(workdir)), calls),
            ("run_file", lambda: _info(_ours(workdir, spool=False)), calls),
            ("plain_file_enqueue", lambda: _info(_plain(workdir, enqueue=True)), calls),
            ("bridge_enqueue", lambda: _info(_ours(workdir, enqueue=True)), calls),
            ("plain_disabled", lambda: _debug(_plain(workdir)), calls * 10),
            ("ours_disabled", lambda: _debug(_ours(workdir)), calls * 10),
            ("ours_disabled_raise", lambda: _debug(_ours(workdir, rules=raise_rules)), calls * 10),
            ("ours_disabled_lower", lambda: _debug(_ours(workdir, rules=lower_rules)), calls * 10),
            ("logflow_disabled_lower", lambda: _debug(_plain(workdir, lower=True)), calls),
        ]
        samples: dict[str, list[float]] = {}
        try:
            for _ in range(rounds):
                for name, setup, n in cases:
                    call = setup()
                    call(-1)  # warm the caches
                    samples.setdefault(name, []).append(_time_calls(call, n))
                    logger.complete()  # drain queues outside the timed part
        finally:
            reset_logging()
            logger.remove()
            if saved is None:
                os.environ.pop("NVRX_NODE_LOCAL_TMPDIR", None)
            else:
                os.environ["NVRX_NODE_LOCAL_TMPDIR"] = saved
    ns = {k: statistics.median(v) for k, v in samples.items()}

    def paired(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(samples[a], samples[b], strict=True))

    return {
        "ns_per_call": ns,
        "ratios": {
            "bridge/plain_file": paired("bridge", "plain_file"),
            "bridge/plain_file_default": paired("bridge", "plain_file_default"),
            "run_file/plain_file": paired("run_file", "plain_file"),
            "bridge_enqueue/plain_file_enqueue": paired("bridge_enqueue", "plain_file_enqueue"),
            "ours_disabled/plain_disabled": paired("ours_disabled", "plain_disabled"),
            "ours_disabled_raise/plain_disabled": paired("ours_disabled_raise", "plain_disabled"),
            "ours_disabled_lower_us": ns["ours_disabled_lower"] / 1000,
            "logflow_disabled_lower_us": ns["logflow_disabled_lower"] / 1000,
        },
        "targets": {
            "bridge/plain_file": 1.15,
            "ours_disabled/plain_disabled": 1.1,
            "ours_disabled_raise/plain_disabled": 1.1,
            "ours_disabled_lower_us": 2.0,
        },
        "calls_per_round": calls,
        "rounds": rounds,
    }


if __name__ == "__main__":
    import orjson

    print(orjson.dumps(run(), option=orjson.OPT_INDENT_2).decode())
