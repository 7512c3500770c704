"""inject_env → a child process continues the launcher's trace; links across processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from opentelemetry import trace

from nvrx_otel.tracing import checkpoint_link, checkpoint_span, ft_span, inject_env, setup_tracing
from nvrx_otel.tracing.propagation import env_parent, parse_traceparent, to_links
from tests.tracing.conftest import run_python, spans


def test_inject_env_copies_the_environment_and_sets_traceparent(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    assert "TRACEPARENT" not in inject_env()  # outside a span nothing is added
    mine: dict[str, str] = {"TRACESTATE": "stale=1"}
    with ft_span("cycle", cycle=0) as span:
        child = inject_env()
        same = inject_env(mine)
    ctx = span.get_span_context()
    expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    assert child["TRACEPARENT"] == expected and child["PATH"] == os.environ["PATH"]
    assert "TRACEPARENT" not in os.environ  # the process's own environment is untouched
    assert same is mine and mine == {"TRACEPARENT": expected}  # no stale TRACESTATE


CHILD = r"""
import threading
from opentelemetry import trace
from nvrx_otel.tracing import setup_tracing, checkpoint_span, checkpoint_link
import sys
setup_tracing()
with checkpoint_span("request", call_idx=4, link=sys.argv[1]):
    pass

def other_thread():
    with trace.get_tracer("worker").start_as_current_span("thread root"):
        pass

t = threading.Thread(target=other_thread)
t.start()
t.join()
"""


def test_child_process_continues_the_launchers_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path))
    setup_tracing()
    with ft_span("cycle", cycle=0) as cycle:
        with checkpoint_span("schedule", call_idx=4) as schedule:
            pass
        link = checkpoint_link(4)
        assert link is not None
        import subprocess
        import sys

        from tests.tracing.conftest import ROOT

        env = inject_env()
        env["PYTHONPATH"] = str(ROOT)
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, link],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    records = [r for r in spans(tmp_path, "span_end") if r["pid"] != os.getpid()]
    by_name = {r["name"]: r for r in records}
    cycle_ctx, schedule_ctx = cycle.get_span_context(), schedule.get_span_context()
    for name in ("nv.nvrx.ckpt.request", "thread root"):
        assert by_name[name]["trace_id"] == f"{cycle_ctx.trace_id:032x}"
        assert by_name[name]["parent_id"] == f"{cycle_ctx.span_id:016x}"
    assert by_name["nv.nvrx.ckpt.request"]["links"] == [
        {
            "trace_id": f"{schedule_ctx.trace_id:032x}",
            "span_id": f"{schedule_ctx.span_id:016x}",
            "attrs": {},
        }
    ]


def test_a_malformed_traceparent_is_reported_and_ignored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert env_parent({"TRACEPARENT": "not-a-traceparent"}) is None
    assert "TRACEPARENT='not-a-traceparent'" in capsys.readouterr().err
    code = (
        "from nvrx_otel.tracing import setup_tracing, ft_span\n"
        f"setup_tracing(spool_dir={str(tmp_path)!r})\n"
        "with ft_span('run', cycle=0):\n"
        "    pass\n"
    )
    proc = run_python(code, {**os.environ, "TRACEPARENT": "00-zz-yy-01"})
    assert proc.returncode == 0 and "is not a W3C traceparent" in proc.stderr
    (end,) = spans(tmp_path, "span_end")
    assert "parent_id" not in end  # a new trace


def test_link_arguments_accept_strings_contexts_and_spans(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tracer = trace.NoOpTracer()
    span = trace.NonRecordingSpan(parse_traceparent(f"00-{'1' * 32}-{'2' * 16}-01"))  # type: ignore[arg-type]
    links = to_links([f"00-{'3' * 32}-{'4' * 16}-00", span, span.get_span_context(), "junk"])
    assert [(link.context.trace_id, link.context.span_id) for link in links] == [
        (int("3" * 32, 16), int("4" * 16, 16)),
        (int("1" * 32, 16), int("2" * 16, 16)),
        (int("1" * 32, 16), int("2" * 16, 16)),
    ]
    assert "cannot link to 'junk'" in capsys.readouterr().err
    assert to_links(None) == [] and to_links(tracer.start_span("x")) == []
