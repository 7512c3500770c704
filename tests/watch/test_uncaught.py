"""Uncaught exceptions with real processes: one ERROR record each, the traceback printed as
before (and not recorded again as stderr lines), the exit code unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.watch.watchkit import Run, run

RAISES = """\
setup_logger()
from nvrx_otel.tracing import setup_tracing
from opentelemetry import trace
setup_tracing()
def step():
    raise RuntimeError("loss is NaN at step 5")
with trace.get_tracer("train").start_as_current_span("train_step"):
    step()
"""


def _uncaught(r: Run) -> list[dict[str, Any]]:
    return [x for x in r.records() if x.get("lg") == "nvrx_otel.uncaught"]


def test_an_uncaught_exception_is_one_error_record_in_its_span(tmp_path: Path) -> None:
    r = run(tmp_path, RAISES)
    off = run(tmp_path / "off", RAISES, NVRX_OTEL_CAPTURE_OUTPUT="off")
    assert r.proc.returncode == off.proc.returncode == 1
    ending = r.ending()
    (rec,) = _uncaught(r)
    assert rec["sev"] == 17 and rec["exc_type"] == "RuntimeError"
    assert rec["exc_msg"] == "loss is NaN at step 5" and rec["fn"] == "step"
    assert rec["exc"].startswith("Traceback (most recent call last)")
    assert rec["attrs"] == {"nv.nvrx.process.uncaught": "main"}
    (span,) = [s for s in _spans(r) if s.get("name") == "train_step" and s["k"] == "span_end"]
    assert span["status"]["code"] == 2  # the span it escaped from ended with ERROR
    assert rec["trace_id"] == span["trace_id"] and rec["span_id"] == span["span_id"]
    # printed exactly as without capture, and not recorded a second time as stderr lines
    assert r.err.read_text() == off.err.read_text().replace(str(off.tmp), str(r.tmp))
    assert "RuntimeError: loss is NaN at step 5" in r.err.read_text()
    assert r.captured("stderr") == []
    assert ending["attrs"]["nv.nvrx.process.outcome"] == "exception"
    assert ending["attrs"]["process.exit.code"] == 1


def _spans(r: Run) -> list[dict[str, Any]]:
    out = []
    for path in sorted(r.spool.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            if doc.get("k") in ("span_start", "span_end", "span"):
                out.append(doc)
    return out


def test_an_uncaught_exception_in_a_thread_is_recorded_and_the_rank_goes_on(
    tmp_path: Path,
) -> None:
    r = run(
        tmp_path,
        """\
        setup_logger()
        def load():
            raise ValueError("bad shard 17")
        t = threading.Thread(target=load, name="loader-1")
        t.start(); t.join()
        print("still training", flush=True)
    """,
    )
    assert r.proc.returncode == 0
    r.ending()
    (rec,) = _uncaught(r)
    assert rec["exc_type"] == "ValueError" and rec["tn"] == "loader-1"
    assert rec["attrs"] == {"nv.nvrx.process.uncaught": "loader-1"}
    assert "ValueError: bad shard 17" in r.err.read_text()
    assert r.captured("stderr") == [] and r.captured("stdout") == ["still training"]


def test_a_previous_excepthook_still_runs(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        """\
        def mine(t, v, tb):
            sys.stderr.write(f"my hook: {v}\\n")
        sys.excepthook = mine
        setup_logger()
        raise KeyError("k")
    """,
    )
    assert r.proc.returncode == 1
    r.ending()
    assert r.err.read_text() == "my hook: 'k'\n"
    assert len(_uncaught(r)) == 1
    assert r.captured("stderr") == ["my hook: 'k'"]  # a hook of its own: captured as is
