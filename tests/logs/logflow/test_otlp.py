"""loguru records travel the same path as stdlib records: spool, aggregator, OTLP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvrx_otel import semconv
from tests.aggregator.spoolkit import NO_WATCHER
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging
from nvrx_otel.semconv import FtSpanKind
from nvrx_otel.tracing import ft_span, setup_tracing

configure_logging(log_dir="{logs}", script_name="train", file_level="TRACE")
setup_tracing()
log = get_logger("trainer")
with ft_span(FtSpanKind.CYCLE, cycle=0):
    log.trace("trace level")
    log.success("it worked")
    log.bind(step=5).info("step {{}}", 5)
log.warning("outside any span")
shutdown_logging()
"""


def test_loguru_records_reach_the_otlp_receiver_with_trace_ids(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RANK", "NVRX_"))}
    env.update(NO_WATCHER)
    env.update(
        NVRX_NODE_LOCAL_TMPDIR=str(tmp_path / "spool"),
        NVRX_OTEL_NODE_ID="n1",
        RANK="0",
        PYTHONPATH=str(ROOT),
    )
    script = SCRIPT.format(logs=tmp_path / "runlogs")
    with OtlpReceiver() as receiver:
        agg = spawn(
            [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
             str(tmp_path / "logs"), "--wait-file", str(tmp_path / "wait"),
             "--check-interval", "0.1", "--otlp-endpoint", receiver.endpoint],
            env=env, stderr=subprocess.PIPE,
        )  # fmt: skip
        rank = spawn([sys.executable, "-c", script], env=env)
        assert rank.wait(timeout=120) == 0
        assert receiver.wait_for(lambda r: len(r.logs) >= 4 and len(r.spans) >= 1)
        (tmp_path / "wait").touch()
        agg.communicate(timeout=60)
        logs = {log["body"]: log for log in receiver.logs}
        (span,) = receiver.spans
    assert set(logs) == {"trace level", "it worked", "step 5", "outside any span"}
    assert (logs["trace level"]["severity_number"], logs["trace level"]["severity_text"]) == (
        1,
        "TRACE",
    )
    assert logs["it worked"]["severity_number"] == 10  # SUCCESS -> INFO2
    assert logs["step 5"]["attributes"]["step"] == 5
    for body in ("trace level", "it worked", "step 5"):
        assert logs[body]["trace_id"] == span["trace_id"]
        assert logs[body]["span_id"] == span["span_id"]
    assert logs["outside any span"]["trace_id"] == ""
    assert all(log["resource"][semconv.WORKLOAD_RANK] == 0 for log in logs.values())
    assert all(log["scope"] == "trainer" for log in logs.values())
    node_log = (tmp_path / "logs" / "nvrx_log_n1.log").read_text()
    assert f"[trace_id={span['trace_id']} span_id={span['span_id']}]" in node_log
