"""The kill switch ``NVRX_OTEL_DISABLED``: what each front end does then, in a fresh
process with a spool configured (which the switch must override).

- ``setup_logger`` returns a working plain logger: NVRx's line format on stderr;
- the loguru front end writes its run file (and console) as LogFlow does, without spooling;
- tracing is a no-op: ``setup_tracing`` installs nothing and returns the API's no-op
  provider, and the span helpers hand out the invalid span;
- the zero-code path (``opentelemetry-instrument``) bridges the root logger to stderr;
- nothing else: no spool file or directory, no thread, no file open but the run file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

SCRIPT = r"""
import json, logging, os, sys, threading
threads = threading.active_count()
def open_files():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return out
fds = open_files()
from opentelemetry import trace
from nvrx_otel.logging import configure_logging, get_logger, setup_logger
from nvrx_otel.logging.setup import setup_root_logger
from nvrx_otel.tracing import checkpoint_span, setup_tracing

log = setup_logger()
log.info("plain stderr record")
configure_logging(log_dir=sys.argv[1], script_name="run", console_level="ERROR")
get_logger("train").info("loguru record")
provider = setup_tracing()
with checkpoint_span("request", call_idx=1) as span:
    helper_span = span
with trace.get_tracer("t").start_as_current_span("api span") as api_span:
    pass
root = setup_root_logger()
logging.getLogger("lib").warning("root record")
from nvrx_otel.logging import shutdown_logging
shutdown_logging()
print(json.dumps({
    "handler": type(log.handlers[0]).__name__,
    "root_handler": type(root.handlers[-1]).__name__,
    "provider": type(provider).__name__,
    "global_provider": type(trace.get_tracer_provider()).__name__,
    "helper_span_valid": helper_span.get_span_context().is_valid,
    "api_span_recording": api_span.is_recording(),
    "threads_added": threading.active_count() - threads,
    "opened": sorted(p for p in open_files() - fds if not p.startswith("/proc/")),
}))
"""


def test_each_front_end_under_the_kill_switch(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    env = {
        "PATH": "/usr/bin:/bin",
        "NVRX_OTEL_DISABLED": "1",
        "NVRX_NODE_LOCAL_TMPDIR": str(spool),
        "SLURM_JOB_ID": "job1",
        "RANK": "0",
        "NVRX_OTEL_NODE_ID": "node7",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "logs")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout.splitlines()[-1])
    assert result == {
        "handler": "StreamHandler",
        "root_handler": "StreamHandler",
        "provider": "NoOpTracerProvider",
        "global_provider": "ProxyTracerProvider",
        "helper_span_valid": False,
        "api_span_recording": False,
        "threads_added": 0,
        "opened": [str(tmp_path / "logs" / "run.log")],  # the run file, and nothing else
    }
    err = done.stderr.splitlines()
    assert any(
        line.endswith("plain stderr record") and "[INFO] [node7] [workload:0(?)" in line
        for line in err
    )
    assert any(line.endswith("root record") for line in err)
    run_file = tmp_path / "logs" / "run.log"
    assert "loguru record" in run_file.read_text()
    assert not spool.exists()  # not even the directory
