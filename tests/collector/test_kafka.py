"""End to end through a real Kafka broker: 2 nodes x 4 ranks → each node's aggregator → its
agent (``agent-kafka.yaml``) → Kafka (one topic per signal) → one gateway
(``gateway-kafka.yaml``) → the gateway's files.

The broker is Apache Kafka 4.x in KRaft mode, one process for the module
(``tests/collector/kafka.py``); each test has topics and a consumer group of its own.
Every record and span must arrive (after de-duplication by the record key, ``log.record.uid``
or its alias ``nv.nvrx.record.key``, and span id; a duplicate must be the same record) also
when, while the ranks' second cycle streams through, the gateway is stopped (SIGTERM or
SIGKILL) and started again, or the broker is killed with SIGKILL and started again on the
same log directory. Duplicates are allowed (at least once) and counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.collector.harness import MakeCollector, attrs, read_requests, wait_until
from tests.collector.job import Job, queue_size, sent_log_records
from tests.collector.kafka import KafkaBroker, KafkaTopics

pytestmark = [pytest.mark.collector, pytest.mark.kafka]

SPANS = 32  # 8 ranks x (2 cycles + 2 checkpoints)
STEP_S = 0.1  # the second cycle's pace: 50 steps a rank over about 5 s


def _job(make_collector: MakeCollector, tmp: Path, broker: KafkaBroker, name: str) -> Job:
    return Job(make_collector, tmp, kafka=KafkaTopics(broker, name))


def _first_cycle_delivered(job: Job) -> None:
    """Until the gateway has every rank's first cycle (half the steps + a checkpoint)."""
    first = len(job.nodes) * job.ranks_per_node * (job.records // 2 + 1)
    wait_until(
        lambda: job.arrived() >= first, "the first cycle at the gateway", 60, on_fail=job.tails
    )


def _report(tmp: Path, found: dict[str, int]) -> None:
    """Keep the counts beside the test's logs (and in -rA output) for the record."""
    (tmp / "counts.json").write_text(json.dumps(found))
    print(f"delivered through Kafka: {found}")


def test_two_node_job_through_kafka(
    make_collector: MakeCollector, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    job = _job(make_collector, tmp_path, kafka_broker, "plain").start()
    job.start_ranks()
    job.finish_ranks()
    job.stop()
    found = job.check_output()
    _report(tmp_path, found)
    assert found["records"] == job.expected_records() == 816
    assert found["spans"] == SPANS
    # The gateway writes each Kafka message as one line (no batching after the receiver),
    # so the lines show the messages: a span message holds one trace (its key is the trace
    # id), a log message one process's resource (its key is the resource's hash).
    for req in read_requests(job.out, "traces"):
        trace_ids = {
            sp["traceId"]
            for rs in req["resourceSpans"]
            for ss in rs["scopeSpans"]
            for sp in ss["spans"]
        }
        assert len(trace_ids) == 1, trace_ids
    log_lines = read_requests(job.out, "logs")
    assert len(log_lines) >= 8  # at least one message per rank
    for req in log_lines:
        resources = {
            tuple(sorted(attrs(rl["resource"]["attributes"]).items())) for rl in req["resourceLogs"]
        }
        assert len(resources) == 1, resources


def _second_cycle_flowing(job: Job) -> None:
    """Release the ranks into their paced second cycle and wait until its first records
    reach the gateway: a fault injected now hits a stream in flight."""
    first = job.arrived()
    job.release()
    wait_until(
        lambda: job.arrived() > first, "the second cycle at the gateway", 60, on_fail=job.tails
    )


def _all_written_to_kafka(job: Job) -> None:
    """Until the agents have written every record to the topics (none waits in a queue)."""
    wait_until(
        lambda: sum(sent_log_records(n.ports.metrics) for n in job.nodes) >= job.expected_records(),
        "every record written to Kafka by the agents",
        60,
        on_fail=job.tails,
    )


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_gateway_restart_mid_stream_loses_nothing(
    make_collector: MakeCollector, tmp_path: Path, kafka_broker: KafkaBroker, how: str
) -> None:
    job = _job(make_collector, tmp_path, kafka_broker, f"gateway-{how}").start()
    job.start_ranks(gated=True, step_s=STEP_S)
    job.wait_half()
    _first_cycle_delivered(job)
    _second_cycle_flowing(job)
    at_fault = job.arrived()
    if how == "sigkill":  # no drain, no commit: what it read since its last commit comes again
        job.gateway.kill()
    else:  # drains what it holds, commits, leaves the group
        assert job.gateway.stop() == 0
    job.finish_ranks()
    _all_written_to_kafka(job)  # Kafka holds the rest while no gateway reads it
    job.restart_gateway()  # the same consumer group: it resumes at the committed offsets
    job.stop()
    found = job.check_output()  # duplicates removed by key (and each the same record)
    _report(tmp_path, {**found, "records_before_fault": at_fault})
    assert at_fault < job.expected_records()  # the fault hit the stream mid-way
    assert found["records"] == job.expected_records()
    assert found["spans"] == SPANS


def test_broker_killed_and_restarted_mid_stream_loses_nothing(
    make_collector: MakeCollector, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    job = _job(make_collector, tmp_path, kafka_broker, "broker-restart").start()
    job.start_ranks(gated=True, step_s=STEP_S)
    job.wait_half()
    _first_cycle_delivered(job)
    _second_cycle_flowing(job)
    at_fault = job.arrived()
    kafka_broker.kill()  # SIGKILL: no controlled shutdown
    try:
        # The agents cannot produce: the rest of the second cycle waits in their
        # persistent queues.
        for node in job.nodes:
            wait_until(
                lambda n=node: queue_size(n.ports.metrics) > 0,  # type: ignore[misc]
                f"records queued in {node.name}'s agent",
                60,
                on_fail=job.tails,
            )
        job.finish_ranks()
    finally:
        kafka_broker.start().wait_ready()  # same ports, same log directory
    job.stop()
    found = job.check_output()
    _report(tmp_path, {**found, "records_before_fault": at_fault})
    assert at_fault < job.expected_records()
    assert found["records"] == job.expected_records()
    assert found["spans"] == SPANS
