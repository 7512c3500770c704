"""End to end: a job of 2 nodes x 4 ranks through node agents into one gateway.

Each node has its own agent (``NVRX_OTEL_NODE_ID`` names the node), spool root and, in
the aggregator mode, its own aggregator exporting OTLP/HTTP to that agent; the ranks are
real processes logging with the stdlib front end inside the span helpers' spans
(``job_rank.py``). After the graceful stop of collector-config/README.md the gateway's
files must hold every log record and span of every rank exactly once after
de-duplication (by ``nv.nvrx.record.key``, by span id), on the resource of its rank and
node, each record carrying the trace and span id of the span it was logged in. The
faults: the gateway down for 10 s mid-job, and an agent killed with SIGKILL and restarted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.collector.harness import MakeCollector, wait_until
from tests.collector.job import Job, queue_size

OUTAGE_S = 10.0


@pytest.mark.collector
@pytest.mark.parametrize(
    "mode",
    [
        # one aggregator per node exporting OTLP/HTTP to its node's agent
        "aggregators",
        # the same with the aggregators speaking OTLP/gRPC (the grpc extra)
        "aggregators_grpc",
        # agent-filelog.yaml: the agents tail the spools (no aggregator); the ranks send
        # spans to their node's agent over OTLP (setup_tracing with NVRX_OTEL_SPOOL_SPANS=0)
        "filelog_agents",
    ],
)
def test_two_node_job(make_collector: MakeCollector, tmp_path: Path, mode: str) -> None:
    job = Job(
        make_collector,
        tmp_path,
        grpc=mode == "aggregators_grpc",
        filelog=mode == "filelog_agents",
    ).start()
    job.start_ranks()
    job.finish_ranks()
    job.stop()
    found = job.check_output()
    assert found["records"] == job.expected_records() == 816
    assert found["spans"] == 32


def _first_cycle_delivered(job: Job) -> None:
    """Wait until the gateway has every rank's first cycle (half the steps + a checkpoint)."""
    first = len(job.nodes) * job.ranks_per_node * (job.records // 2 + 1)
    wait_until(lambda: job.arrived() >= first, "the first cycle at the gateway", on_fail=job.tails)


@pytest.mark.collector
def test_gateway_down_10_s_mid_job_loses_nothing(
    make_collector: MakeCollector, tmp_path: Path
) -> None:
    job = Job(make_collector, tmp_path).start()
    job.start_ranks(gated=True)
    job.wait_half()
    _first_cycle_delivered(job)
    assert job.gateway.stop() == 0
    job.release()  # the second cycle is logged while the gateway is down
    job.finish_ranks()
    # The agents took the second cycle from the aggregators and hold it in their queues.
    for node in job.nodes:
        wait_until(
            lambda n=node: queue_size(n.ports.metrics) > 0,  # type: ignore[misc]
            f"records queued in {node.name}'s agent",
            on_fail=job.tails,
        )
    time.sleep(OUTAGE_S)  # the outage itself: deliberately 10 s
    job.restart_gateway()
    job.stop()
    found = job.check_output()
    assert found["records"] == job.expected_records()
    assert found["spans"] == 32


@pytest.mark.collector
def test_agent_sigkilled_and_restarted_loses_nothing(
    make_collector: MakeCollector, tmp_path: Path
) -> None:
    job = Job(make_collector, tmp_path).start()
    job.start_ranks(gated=True)
    job.wait_half()
    _first_cycle_delivered(job)
    node = job.nodes[0]
    assert node.agent.proc is not None
    node.agent.proc.kill()
    assert node.agent.stop() == -9
    job.release()  # the second cycle is logged while node-0 has no agent
    job.finish_ranks()
    # node-0's aggregator has read everything (its node log shows it) but cannot export.
    wait_until(
        lambda: job.node_log_records(node) == job.ranks_per_node * (job.records + 2),
        "the whole job in node-0's node log",
    )
    job.restart_agent(node)  # same ports and storage: the aggregator's retries get through
    job.stop()
    found = job.check_output()  # duplicates are allowed; they are removed by key
    assert found["records"] == job.expected_records()
    assert found["spans"] == 32
