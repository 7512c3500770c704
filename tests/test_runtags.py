"""Run tags: bound once (NVRX_OTEL_RUN_TAGS or set_run_tags), resource attributes of every
record of both front ends and of every span, at no cost per record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx_otel import identity, run_tags, semconv, set_run_tags
from nvrx_otel.envparse import format_tags, parse_tags
from tests.aggregator.spoolkit import config, process_env, running
from tests.otlp_receiver import OtlpReceiver


def test_environment_tags_become_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_OTEL_RUN_TAGS", "experiment=sweep-7, run_id=r42,lr=3e-4")
    assert run_tags() == {
        semconv.RUN_EXPERIMENT: "sweep-7",
        semconv.RUN_ID: "r42",
        f"{semconv.RUN_TAG}.lr": "3e-4",
    }
    attrs = identity.get_identity().attributes()
    assert attrs[semconv.RUN_ID] == "r42" and attrs["nv.nvrx.run.tag.lr"] == "3e-4"
    assert identity.get_identity().resource().attributes[semconv.RUN_EXPERIMENT] == "sweep-7"


def test_set_run_tags_replaces_and_exports_to_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_OTEL_RUN_TAGS", "experiment=old")
    got = set_run_tags(run_id="r1", note="a,b=c d")
    assert got == {semconv.RUN_ID: "r1", "nv.nvrx.run.tag.note": "a,b=c d"}
    exported = os.environ["NVRX_OTEL_RUN_TAGS"]
    assert parse_tags("X", exported) == (("run_id", "r1"), ("note", "a,b=c d"))
    child = subprocess.run(
        [sys.executable, "-c", "import nvrx_otel; print(sorted(nvrx_otel.run_tags().items()))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == str(sorted(got.items()))


def test_bad_tags_are_refused_or_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="run tag key"):
        set_run_tags(**{"bad key": "x"})
    with pytest.raises(ValueError, match="control characters"):
        set_run_tags(note="line\nbreak")
    monkeypatch.setenv("NVRX_OTEL_RUN_TAGS", "no-equals-sign")
    assert run_tags() == {}
    assert "NVRX_OTEL_RUN_TAGS='no-equals-sign'" in capsys.readouterr().err
    assert format_tags((("k", "v"),)) == "k=v"


RANK = """
from nvrx_otel import set_run_tags
set_run_tags(experiment="sweep-7", run_id="r42", lr=0.0003)
from nvrx_otel.logging import get_logger, setup_logger
from nvrx_otel.tracing import setup_tracing
from opentelemetry import trace
setup_tracing()
with trace.get_tracer("t").start_as_current_span("step"):
    setup_logger().info("stdlib record")
    get_logger("train").info("loguru record")
"""


def test_every_record_and_span_carries_the_tags_over_otlp(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RANK],
        env=process_env(tmp_path, "testnode", SLURM_JOB_ID="job1", RANK="0"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with OtlpReceiver() as receiver, running(config(tmp_path, otlp_endpoint=receiver.endpoint)):
        assert receiver.wait_for(lambda r: len(r.logs) >= 2 and len(r.spans) >= 1, timeout=60), (
            "records did not arrive"
        )
    expected = {
        semconv.RUN_EXPERIMENT: "sweep-7",
        semconv.RUN_ID: "r42",
        "nv.nvrx.run.tag.lr": "0.0003",
    }
    bodies = sorted(r["body"] for r in receiver.logs)
    assert bodies == ["loguru record", "stdlib record"]
    for item in receiver.logs + receiver.spans:
        assert {k: item["resource"].get(k) for k in expected} == expected
    assert not any(k.startswith("nv.nvrx.run") for r in receiver.logs for k in r["attributes"])
