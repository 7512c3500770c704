"""What the registry declares is emitted, and what is emitted is declared.

A small job runs real processes: ranks logging through the stdlib and loguru front ends
inside the tracing helpers' spans (fault-tolerance, checkpoint, save phase, a fault) under
a launcher's TRACEPARENT, one killed inside a span, a corrupt spool line, all through a
real ``nvrx-otel aggregate --otlp-json``; and a rank on the SDK path, its spans encoded by
the SDK's OTLP encoder. The aggregator runs with ``--dedup-window``, so the records ranks 0
and 1 share are collapsed ones. Every attribute key of that OTLP/JSON output must be in the
registry or in OpenTelemetry's semantic conventions, and every key the registry declares
must be in the output (``tests/semconv_check.py`` does both, for any OTLP/JSON files).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nvrx_otel import semconv
from tests.aggregator.semconv_rank import USER_KEYS
from tests.aggregator.spoolkit import process_env
from tests.conftest import spawn
from tests.semconv_check import never_emitted, otlp_attribute_keys, otlp_requests, undeclared

RANK_SCRIPT = Path(__file__).with_name("semconv_rank.py")
PARENT_TRACE, PARENT_SPAN = "5e" * 16, "1a" * 8
DEDUP_WINDOW_MS = 10_000
"""Ranks 0 and 1 log the same records at about the same time: within this window they
collapse into records with the ``nv.nvrx.dedup.*`` attributes."""
JOB = {  # a Slurm array task of a torchrun job, in its second restart cycle
    "SLURM_ARRAY_JOB_ID": "77",
    "SLURM_ARRAY_TASK_ID": "3",
    "SLURM_JOB_ID": "80",
    "SLURM_NNODES": "1",
    "WORLD_SIZE": "3",
    "LOCAL_WORLD_SIZE": "3",
    "GROUP_RANK": "0",
    "TORCHELASTIC_RESTART_COUNT": "1",
    "TRACEPARENT": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01",
    "NVRX_OTEL_RUN_TAGS": "experiment=sweep-7,run_id=r42,lr=3e-4",  # the run tags too
}


def _rank_env(tmp: Path, rank: int) -> dict[str, str]:
    return process_env(
        tmp,
        "node-a",
        **JOB,
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(rank),
    )


def _rank(tmp: Path, rank: int, mode: str, out: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(RANK_SCRIPT), mode, str(out)]
    env = _rank_env(tmp, rank)
    if mode == "sdk":  # no spool: spans take the SDK path
        del env["NVRX_NODE_LOCAL_TMPDIR"]
    if mode.startswith("watched"):  # with a watcher (its records' attributes)
        env.update(NVRX_OTEL_CAPTURE_OUTPUT="on", NVRX_OTEL_CAPTURE_STACKS="on")
    return spawn(cmd, env=env, stdout=subprocess.PIPE, cwd=tmp)


def _until(cond: object, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def run_small_job(tmp: Path) -> list[Path]:
    """Run the job; return its OTLP/JSON files (aggregator output and the SDK path's)."""
    ranks = [_rank(tmp, rank, "spool", tmp / "logflow") for rank in (0, 1)]
    for proc in ranks:  # together: their identical records fall in one --dedup-window
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.endswith(b"ready\n")
    dying = _rank(tmp, 2, "die_in_span", tmp / "logflow")
    assert dying.stdout is not None and dying.stdout.readline() == b"ready\n"
    os.kill(dying.pid, signal.SIGKILL)
    dying.communicate(timeout=30)
    watched = _rank(tmp, 4, "watched_exit", tmp / "logflow")
    watched.communicate(timeout=120)
    assert watched.returncode == 0
    termed = _rank(tmp, 5, "watched_term", tmp / "logflow")
    assert termed.stdout is not None and termed.stdout.readline() == b"ready\n"
    termed.terminate()
    termed.communicate(timeout=30)

    def ended() -> bool:  # both watchers wrote how their rank ended
        text = b"".join(p.read_bytes() for p in (tmp / "spool").rglob("*-watch.*.jsonl"))
        return text.count(b"nv.nvrx.process.outcome") == 2

    _until(ended, "the watchers' ending records")
    sdk_out = tmp / "sdk" / "traces.jsonl"
    sdk_out.parent.mkdir()
    sdk = _rank(tmp, 3, "sdk", sdk_out)
    sdk.communicate(timeout=120)
    assert sdk.returncode == 0
    (spool,) = (tmp / "spool").iterdir()
    assert spool.name == "77_3"
    with sorted(spool.glob("*.jsonl"))[0].open("ab") as f:
        f.write(b"not a record\n")  # reported as corrupt: the nv.nvrx.drop.* attributes

    agg_env = process_env(tmp, "node-a", **{k: v for k, v in JOB.items() if k != "TRACEPARENT"})
    otlp = tmp / "otlp"
    agg = spawn(
        [sys.executable, "-m", "nvrx_otel", "aggregate", "--log-dir", str(tmp / "logs"),
         "--wait-file", str(tmp / "wait"), "--check-interval", "0.1", "--drain-timeout", "30",
         "--otlp-json", str(otlp), "--dedup-window", str(DEDUP_WINDOW_MS)],
        env=agg_env, stderr=subprocess.PIPE,
    )  # fmt: skip
    logs, traces = otlp / "logs_node-a.jsonl", otlp / "traces_node-a.jsonl"

    def delivered() -> bool:
        text = logs.read_text() if logs.exists() else ""
        spans = traces.read_text() if traces.exists() else ""
        return (
            "about to die" in text
            and "corrupt" in text
            and semconv.SPAN_TRUNCATED in spans
            and spans.count(semconv.SPAN_CKPT_SAVE_WRITE) >= 3
        )

    _until(delivered, "the job's logs and spans in the aggregator's OTLP/JSON output")
    (tmp / "wait").touch()
    _, err = agg.communicate(timeout=120)
    assert agg.returncode == 0, err.decode()
    return [logs, traces, sdk_out]


def test_what_is_emitted_is_declared_and_what_is_declared_is_emitted(tmp_path: Path) -> None:
    files = run_small_job(tmp_path)
    keys = otlp_attribute_keys(files)
    assert undeclared(keys, own=USER_KEYS) == []
    assert never_emitted(keys) == []
    assert set(USER_KEYS) <= set(keys)  # the caller's own keys went through as given
    assert "log.logger.name" not in keys  # the logger name is the scope's name

    requests = otlp_requests(files)
    resources = [r for req in requests for r in req.get("resourceLogs", [])]
    resources += [r for req in requests for r in req.get("resourceSpans", [])]
    for res in resources:  # resources and scopes say which conventions they follow
        assert res["schemaUrl"] == semconv.SCHEMA_URL
        for scope in res.get("scopeLogs", []) + res.get("scopeSpans", []):
            assert scope["schemaUrl"] == semconv.SCHEMA_URL
    logs = [lr for r in resources for s in r.get("scopeLogs", []) for lr in s["logRecords"]]
    for lr in logs:  # every record has its uid, and the deprecated alias for one release
        attrs = {kv["key"]: kv["value"] for kv in lr["attributes"]}
        assert attrs[semconv.LOG_RECORD_UID] == attrs[semconv.RECORD_KEY]
    roots = [
        span
        for r in resources
        for s in r.get("scopeSpans", [])
        for span in s["spans"]
        if span.get("parentSpanId") == PARENT_SPAN
    ]
    assert len(roots) >= 4  # each rank's first span, on either path
    for span in roots:  # the launcher's span is another process's: a remote parent
        assert span["traceId"] == PARENT_TRACE
        assert int(span["flags"]) & 0x300 == 0x300
