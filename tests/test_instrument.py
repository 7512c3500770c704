"""``opentelemetry-instrument python train.py`` with nvrx-otel as the distro: the script's
spans and stdlib log records reach the node log and OTLP, correlated, with no code change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.aggregator.spoolkit import (
    LINE,
    config,
    log_lines,
    log_path,
    process_env,
    running,
    wait_for,
)
from tests.otlp_receiver import OtlpReceiver

SCRIPT = """
import logging
from opentelemetry import trace

log = logging.getLogger("train")
with trace.get_tracer("train").start_as_current_span("step"):
    log.info("inside the span")
log.debug("below the level")
print(type(trace.get_tracer_provider()).__name__)
"""

INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"


@pytest.mark.parametrize("named", [True, False], ids=["OTEL_PYTHON_DISTRO", "only-distro"])
def test_zero_code_spans_and_logs_reach_node_log_and_otlp(tmp_path: Path, named: bool) -> None:
    assert INSTRUMENT.exists(), "opentelemetry-instrument is missing: install the instrument extra"
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    extra = {"SLURM_JOB_ID": "job1", "RANK": "0"}
    if named:
        extra["OTEL_PYTHON_DISTRO"] = "nvrx_otel"
    done = subprocess.run(
        [str(INSTRUMENT), sys.executable, str(script)],
        env=process_env(tmp_path, "testnode", **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "NvrxTracerProvider"
    with OtlpReceiver() as receiver, running(config(tmp_path, otlp_endpoint=receiver.endpoint)):
        receiver.wait_for(lambda r: bool(r.logs) and bool(r.spans), timeout=60)
        wait_for(lambda: log_lines(log_path(tmp_path)), timeout=60, what="node log")
    (span,) = receiver.spans
    assert span["name"] == "step"
    (record,) = [r for r in receiver.logs if r["body"] == "inside the span"]
    assert (record["trace_id"], record["span_id"]) == (span["trace_id"], span["span_id"])
    lines = [m for m in map(LINE.match, log_lines(log_path(tmp_path))) if m]
    (line,) = [m for m in lines if m["msg"] == "inside the span"]
    assert (line["trace"], line["span"], line["file"]) == (
        span["trace_id"],
        span["span_id"],
        "train.py",
    )
    assert not any(m["msg"] == "below the level" for m in lines)  # INFO, as setup_logger
