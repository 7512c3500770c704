"""``nvrx-otel logs`` reads the gateway's file exporter output: ``logs.jsonl`` and its
rotated backups ``logs-<time>-size.jsonl`` (rotated at 1 MB here), in one time order."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from nvrx_otel import semconv
from nvrx_otel.view.files import find_streams
from tests.collector.harness import MakeCollector, Ports, gateway_env, running, wait_until
from tests.collector.test_agent_gateway import log_request, post

REQUESTS = 8
PER_REQUEST = 200
BODY = "x" * 700  # about 1 KB a record in the file: 160 KB a request, 1.3 MB in all


@pytest.mark.collector
def test_view_reads_the_gateway_files_and_their_rotated_backups(
    make_collector: MakeCollector, tmp_path: Path
) -> None:
    (ports,) = Ports.pick(1)
    out = tmp_path / "out"
    gateway = make_collector(
        "gateway",
        ["gateway.yaml"],
        gateway_env(ports, out, NVRX_OTEL_GATEWAY_ROTATE_MB="1"),
        ports.health,
    )
    t0 = time.time_ns() - 60_000_000_000
    with running(gateway):
        for i in range(REQUESTS):
            rank = i % 4
            resource = {semconv.NODE_ID: f"node-{rank // 2}", semconv.WORKLOAD_RANK: rank}
            records = [
                # requests interleave in time: request i holds steps i, i+8, i+16, ...
                {
                    "ts": t0 + (j * REQUESTS + i) * 1_000_000,
                    "msg": f"{j * REQUESTS + i} {BODY}",
                    "key": f"{i}-{j}",
                }
                for j in range(PER_REQUEST)
            ]
            post(ports.http, "/v1/logs", log_request(resource, records))
            # one request per write: the file exporter refuses a write larger than a file
            wait_until(
                lambda n=i + 1: _written(out) >= n * PER_REQUEST,
                f"request {i + 1} in the files",
                on_fail=gateway.log_tail,
            )
    names = sorted(p.name for p in out.glob("logs*.jsonl"))
    assert len(names) >= 2 and names[-1] == "logs.jsonl", names  # rotated at least once
    (stream,) = find_streams([str(out)])  # the backups and the live file: one stream
    assert [p.name for p in stream.files] == names
    run = subprocess.run(
        [sys.executable, "-m", "nvrx_otel", "logs", str(out), "--json", "--no-dedup"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stderr == ""
    docs = [orjson.loads(line) for line in run.stdout.splitlines()]
    steps = [int(d["message"].split(" ", 1)[0]) for d in docs]
    assert steps == list(range(REQUESTS * PER_REQUEST))  # every record once, in time order
    assert {(d["node"], d["rank"]) for d in docs} == {
        ("node-0", 0),
        ("node-0", 1),
        ("node-1", 2),
        ("node-1", 3),
    }


def _written(out: Path) -> int:
    total = 0
    for path in out.glob("logs*.jsonl"):
        data = path.read_bytes()
        total += data[: data.rfind(b"\n") + 1].count(b'"timeUnixNano"')
    return total
