"""The package under the real Open MPI and MPICH launchers (Debian's ``openmpi-bin`` and
``mpich``): four ranks log through NVRx's ``setup_logger()`` inside spans, the aggregator
writes the node log and exports OTLP to a receiver on 127.0.0.1.

Each rank writes down the launcher variables it was started with; the identity in the node
log and in the OTLP resources is compared with those, and with concrete values. What the
launchers export is in ``mpikit``'s launcher table, which docs/identity.md
states."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel import semconv
from tests.launchers.mpi_rank import FAIL_CODE
from tests.launchers.mpikit import (
    MPICH,
    MPICH_PMI_PORT_TWO_PROXIES,
    OPENMPI,
    Job,
    Launcher,
    check_node_log,
    identities,
    resource_identity,
    unique_logs,
)
from tests.otlp_receiver import OtlpReceiver

RECORDS = 200
RANKS = [0, 1, 2, 3]


def _sorted(values: Iterable[int | None]) -> list[int | None]:
    return sorted(values, key=lambda v: (v is None, v or 0))  # unknown (None) last


def _by_pid(items: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        out[item["resource"][semconv.PROCESS_PID]].append(item)
    return dict(out)


@pytest.mark.parametrize(
    ("launcher", "local_ranks", "world_size", "local_world_size"),
    [
        (OPENMPI, [0, 1, 2, 3], 4, 4),
        (MPICH, [0, 1, 2, 3], 4, 4),
        (MPICH_PMI_PORT_TWO_PROXIES, [0, 0, 1, 1], None, 2),
    ],
    ids=["openmpi", "mpich", "mpich-pmi-port-two-proxies"],
)
def test_every_record_with_the_launchers_identity_in_node_log_and_otlp(
    tmp_path: Path,
    launcher: Launcher,
    local_ranks: list[int],
    world_size: int | None,
    local_world_size: int,
) -> None:
    with OtlpReceiver(max_lifetime=600) as receiver:
        job = Job(tmp_path, launcher, RECORDS)
        agg = job.start_aggregator("--otlp-endpoint", receiver.endpoint)
        assert job.launch() == 0, job.output
        job.stop_aggregator(agg)
        want = identities(job.launcher, job.out, job.output)
        assert _sorted(w["rank"] for w in want.values()) == RANKS
        assert _sorted(w["lrank"] for w in want.values()) == local_ranks
        assert {w["world_size"] for w in want.values()} == {world_size}
        assert {w["local_world_size"] for w in want.values()} == {local_world_size}

        check_node_log(job.node_log(), want, RECORDS)

        total = 4 * (RECORDS + 1)
        assert receiver.wait_for(lambda r: len(unique_logs(r.logs)) >= total, 120)
        assert receiver.wait_for(lambda r: len(r.spans) >= 8, 120)
        logs, spans = _by_pid(unique_logs(receiver.logs)), _by_pid(receiver.spans)
    assert set(logs) == set(spans) == set(want)
    for pid, ident in want.items():
        assert len(logs[pid]) == RECORDS + 1
        assert all(resource_identity(x["resource"]) == ident for x in logs[pid]), pid
        assert {s["name"] for s in spans[pid]} == {
            semconv.SPAN_FTL_CYCLE,
            semconv.SPAN_CKPT_SCHEDULE,
        }
        assert all(resource_identity(s["resource"]) == ident for s in spans[pid]), pid


@pytest.mark.parametrize("launcher", [OPENMPI, MPICH], ids=["openmpi", "mpich"])
def test_a_failing_rank_keeps_every_record_and_the_launcher_fails(
    tmp_path: Path, launcher: Launcher
) -> None:
    """Rank 1 exits 3 once every rank has logged. Open MPI then kills the other ranks
    (SIGTERM) inside their open ``fault`` spans; MPICH's Hydra lets them end (they exit
    0). Either way the launcher exits with 3 and the node log has every record logged
    before; the spans of killed ranks reach OTLP ended as truncated."""
    mode = "linger" if launcher.kills_on_failure else "exit"
    with OtlpReceiver(max_lifetime=600) as receiver:
        job = Job(tmp_path, launcher, RECORDS)
        agg = job.start_aggregator("--otlp-endpoint", receiver.endpoint)
        assert job.launch("1", mode) == FAIL_CODE, job.output
        job.stop_aggregator(agg)
        want = identities(job.launcher, job.out, job.output)
        lines = check_node_log(job.node_log(), want, RECORDS)
        (failed,) = [pid for pid, ident in want.items() if ident["rank"] == 1]
        assert lines[failed][-1]["msg"] == f"failing now of pid {failed}"
        assert lines[failed][-1]["lvl"] == "ERROR"
        others = set(want) - {failed}
        assert all(not any("not killed" in x["msg"] for x in lines[pid]) for pid in others)

        total = 4 * (RECORDS + 1) + 1  # and the failing rank's last record
        assert receiver.wait_for(lambda r: len(unique_logs(r.logs)) >= total, 120)
        assert receiver.wait_for(
            lambda r: sum(s["name"] == semconv.SPAN_FTL_FAULT for s in r.spans) >= 3, 120
        )
        spans = _by_pid(receiver.spans)
    for pid in others:
        (fault,) = [s for s in spans[pid] if s["name"] == semconv.SPAN_FTL_FAULT]
        truncated = fault["attributes"].get(semconv.SPAN_TRUNCATED, False)
        assert truncated is launcher.kills_on_failure, (pid, fault)
