"""The spool bridge: every loguru record becomes the project's record in the rank's spool,
written at the call site (also with ``enqueue=True``, also when the process is killed),
and reaches the node log through the aggregator like stdlib records do."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from nvrx_otel import record as rec
from nvrx_otel.aggregator.service import AggregatorConfig
from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
from tests.aggregator.spoolkit import LINE as NODE_LINE
from tests.aggregator.spoolkit import running
from tests.logs.logflow.kit import messages, run_script, spool_logs

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


def _span() -> Any:
    ctx = SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1))
    return trace.use_span(NonRecordingSpan(ctx))


def test_record_fields(spool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    configure_logging(script_name="run", file_level="TRACE")
    times: list[Any] = []
    logger.add(lambda m: times.append(m.record["time"]), level="TRACE")
    log = get_logger("trainer").bind(step=7, run={"id": 3, "tags": {"a": 1}})
    line = sys._getframe().f_lineno + 1
    log.trace("t {}", 1)
    log.success("s")
    get_logger().debug("unnamed")
    recs = spool_logs(spool / "77")
    assert [(r["lvl"], r["sev"], r["msg"]) for r in recs] == [
        ("TRACE", 1, "t 1"),
        ("SUCCESS", 10, "s"),
        ("DEBUG", 5, "unnamed"),
    ]
    first = recs[0]
    assert [r["ts"] for r in recs] == [round(t.timestamp() * 1e6) * 1000 for t in times]
    assert first["lg"] == "trainer" and recs[2]["lg"] == __name__  # bound name, else module
    assert first["attrs"] == {"step": 7, "run.id": 3, "run.tags.a": 1}
    assert "name" not in recs[1]["attrs"] and "attrs" not in recs[2]
    assert (first["path"], first["file"], first["line"], first["fn"]) == (
        __file__, Path(__file__).name, line, "test_record_fields",
    )  # fmt: skip
    assert first["pid"] == os.getpid() and first["tid"] == threading.get_ident()
    assert first["tn"] == "MainThread" and first["rank"] == 2 and first["job"] == "77"
    assert "seq" not in first and rec.seq_of(first["key"]) >= 0
    assert "trace_id" not in first


@pytest.mark.parametrize("name", ["RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID"])
def test_rank_beyond_64_bits_never_breaks_get_logger_nor_drops_records(
    name: str, spool: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(name, str(2**64 + 5))
    configure_logging(script_name="run")
    get_logger("t").info("fine")
    get_logger("t").info("{}", "x" * 200_000)  # past the file size: the slow path packs too
    fine, _big = spool_logs(spool)
    assert fine["msg"] == "fine" and "rank" not in fine and "irank" not in fine
    err = capsys.readouterr().err
    assert f"{name}='{2**64 + 5}'" in err and "TypeError" not in err


def test_trace_ids_of_the_call_site_and_exceptions(spool: Path) -> None:
    configure_logging(script_name="run")
    with _span():
        get_logger("t").info("inside")
        try:
            raise ValueError("bad")
        except ValueError:
            get_logger("t").exception("failed")
    get_logger("t").info("outside")
    inside, failed, outside = spool_logs(spool)
    assert inside["trace_id"] == f"{TRACE_ID:032x}" and inside["span_id"] == f"{SPAN_ID:016x}"
    assert inside["tf"] == 1 and failed["trace_id"] == inside["trace_id"]
    assert failed["exc_type"] == "ValueError" and failed["exc_msg"] == "bad"
    assert "Traceback (most recent call last)" in failed["exc"]
    assert "trace_id" not in outside


def test_spool_follows_the_file_levels(spool: Path) -> None:
    configure_logging(
        script_name="run", file_level="INFO", module_levels={"noisy": {"file": "DEBUG"}}
    )
    code = compile("logger.debug('noisy debug')", "<noisy>", "exec")
    exec(code, {"__name__": "noisy.mod", "logger": logger})
    get_logger("t").debug("dropped")
    get_logger("t").info("kept")
    assert [r["msg"] for r in spool_logs(spool)] == ["noisy debug", "kept"]


def test_with_enqueue_the_record_is_spooled_at_the_call_site(spool: Path, tmp_path: Path) -> None:
    configure_logging(script_name="run", enqueue=True)
    seen: list[dict[str, Any]] = []

    def worker() -> None:
        get_logger("w").info("from a thread")
        seen.extend(spool_logs(spool))  # before any queue is drained

    t = threading.Thread(target=worker, name="trainer-thread")
    t.start()
    t.join()
    (rec,) = seen
    assert rec["tn"] == "trainer-thread" and rec["tid"] == t.ident
    shutdown_logging()
    shutdown_logging()  # idempotent
    assert messages(tmp_path / "logs" / "run.log") == ["from a thread"]


def test_killed_process_keeps_what_it_logged(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    proc = run_script(
        tmp_path,
        "killed",
        """
        import os, signal
        from nvrx_otel.logging import configure_logging, get_logger
        configure_logging(enqueue=True, console_level="CRITICAL")
        log = get_logger("k")
        for i in range(3):
            log.info("before the kill {}", i)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        NVRX_NODE_LOCAL_TMPDIR=str(spool),
    )
    assert proc.returncode == -9, proc.stderr
    assert [r["msg"] for r in spool_logs(spool)] == [f"before the kill {i}" for i in range(3)]


def test_loguru_records_reach_the_node_log(spool: Path, tmp_path: Path) -> None:
    configure_logging(script_name="run")
    cfg = AggregatorConfig(
        log_dir=tmp_path / "agg",
        spool_root=spool,
        node_id="testnode",
        check_interval=0.05,
        drain_timeout=0.5,
        status_interval=0,
    )
    with running(cfg) as agg:
        with _span():
            get_logger("t").info("loguru in a span")
        get_logger("t").warning("loguru outside")
    lines = [m for m in map(NODE_LINE.match, agg.log_path.read_text().splitlines()) if m]
    assert [(m["lvl"], m["msg"], m["file"]) for m in lines] == [
        ("INFO", "loguru in a span", Path(__file__).name),
        ("WARNING", "loguru outside", Path(__file__).name),
    ]
    assert lines[0]["trace"] == f"{TRACE_ID:032x}" and lines[0]["span"] == f"{SPAN_ID:016x}"
    assert lines[1]["trace"] is None
