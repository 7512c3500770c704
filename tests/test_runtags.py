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


def test_set_run_tags_refuses_a_value_no_child_could_inherit(tmp_path: Path) -> None:
    """A config dump as a tag (percent-encoded past Linux's 128 KiB per environment string)
    made every later subprocess fail with E2BIG: refused, naming the key and the size, and
    nothing changed; processes still start."""
    code = """
import json, subprocess, sys
import nvrx_otel
nvrx_otel.set_run_tags(run_id="r1")
for value in ("x" * 200_000, json.dumps({f"layer{i}": "x" * 20 for i in range(400)})):
    try:
        nvrx_otel.set_run_tags(run_id="r2", config=value)
    except ValueError as exc:
        print(exc)
    else:
        sys.exit("accepted")
print(nvrx_otel.run_tags())
subprocess.run([sys.executable, "-c", "import nvrx_otel; print(nvrx_otel.run_tags())"], check=True)
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=process_env(tmp_path, "n0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-500:]
    said = done.stdout.splitlines()
    assert said[0].startswith("set_run_tags(): run tags take ")
    assert "more than 4096 (the largest: config, " in said[0] and len(said[0]) < 400
    assert said[2] == said[3] == str({semconv.RUN_ID: "r1"})  # kept, and inherited


def test_oversized_environment_tags_are_reported_in_one_line_and_ignored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NVRX_OTEL_RUN_TAGS", "run_id=r1,note=" + "n" * 100_000)
    assert run_tags() == {}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVRX_OTEL_RUN_TAGS: run tags take 100" in err
    assert "the largest: note, " in err and "nnnnnnnn" not in err


LATE = """
import glob, json, sys
import nvrx_otel
from nvrx_otel.logging import setup_logger
log = setup_logger()
nvrx_otel.set_run_tags(run_id="early")  # a writer exists, no file yet: no warning
print("early done", file=sys.stderr, flush=True)
log.info("first")
nvrx_otel.set_run_tags(run_id="late")
nvrx_otel.set_run_tags(run_id="later")  # said once
for i in range(200):
    log.info("record %d %s", i, "x" * 100)
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    header = json.loads(open(f).readline())
    print(json.dumps(header).count('"early"'), json.dumps(header).count('"later"'))
"""


def test_set_run_tags_after_the_first_record_is_not_silent(tmp_path: Path) -> None:
    """Tags set after a writer made its first file: said once on stderr; that file keeps
    the tags from before, the writer's next files carry the new ones."""
    done = subprocess.run(
        [sys.executable, "-c", LATE, str(tmp_path / "spool" / "job1")],
        env=process_env(tmp_path, "n0", SLURM_JOB_ID="job1", NVRX_LOG_MAX_FILE_SIZE_KB="4"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    early, late = done.stderr.split("early done\n")
    assert "set_run_tags" not in early
    assert late.count("set_run_tags() after this process began spooling") == 1
    headers = [tuple(map(int, line.split())) for line in done.stdout.splitlines()]
    assert len(headers) >= 2, headers
    assert headers[0] == (1, 0)  # made before: the tags bound then
    assert all(h == (0, 1) for h in headers[1:]), headers
