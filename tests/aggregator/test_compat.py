"""NVRx's in-process API: ``NodeLogAggregator(log_dir, temp_dir, log_file, max_file_size,
en_chrono_ord)`` with ``start_aggregator()`` / ``shutdown()``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nvrx_otel import clear_identity
from nvrx_otel.aggregator.lifecycle import AggregatorError
from tests.aggregator.spoolkit import FakeWriter, messages, wait_for


def test_node_log_aggregator_runs_in_a_thread_until_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NVRX_OTEL_NODE_ID", "cnode")
    clear_identity()
    try:
        from nvrx_otel.logging import NodeLogAggregator

        w = FakeWriter(tmp_path / "spool" / "nojob")
        w.log("through the NVRx API")
        agg = NodeLogAggregator(
            str(tmp_path / "logs"), str(tmp_path / "spool"), "node.log", 1, False
        )
        agg.start_aggregator()
        agg.start_aggregator()  # a second start does nothing
        out = tmp_path / "logs" / "node.log"
        wait_for(lambda: messages(out) == ["through the NVRx API"], what="record")
        with pytest.raises(AggregatorError, match="another aggregator"):
            NodeLogAggregator(
                str(tmp_path / "l2"), str(tmp_path / "spool"), "x", 1, True
            ).start_aggregator()
        w.log("before shutdown")
        w.close()
        agg.shutdown()
        agg.shutdown()
        assert messages(out) == ["through the NVRx API", "before shutdown"]
        assert "[cnode]" in out.read_text()
    finally:
        clear_identity()


def test_shutdown_in_a_process_that_logs_itself_does_not_wait_for_its_own_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calling process's own writer lives on after shutdown; waiting for it to end
    meant the whole drain timeout (20 s). Its records all reach the node log."""
    monkeypatch.setenv("NVRX_OTEL_NODE_ID", "cnode")
    clear_identity()
    from nvrx_otel.logging import NodeLogAggregator, setup_logger

    spool = tmp_path / "spool"
    log = setup_logger(node_local_tmp_dir=str(spool))
    agg = NodeLogAggregator(str(tmp_path / "logs"), str(spool), "node.log", 1, False)
    assert agg.aggregator.config.drain_timeout >= 20
    agg.start_aggregator()
    for i in range(200):
        log.info("own record %d", i)
    started = time.monotonic()
    agg.shutdown()
    took = time.monotonic() - started
    out = tmp_path / "logs" / "node.log"
    assert messages(out) == [f"own record {i}" for i in range(200)]
    assert took < agg.aggregator.config.drain_timeout / 2, f"shutdown took {took:.1f} s"
    log.info("after shutdown")  # the writer goes on; the next aggregator takes it
    assert any(b"after shutdown" in p.read_bytes() for p in (spool / "nojob").glob("*.jsonl"))


def test_node_log_aggregator_with_an_endpoint_that_is_not_a_url_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """In the training process a bad OTEL_EXPORTER_OTLP_ENDPOINT turns OTLP off with one
    line naming it; the node log is written as always."""
    monkeypatch.setenv("NVRX_OTEL_NODE_ID", "cnode")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")
    clear_identity()
    try:
        from nvrx_otel.logging import NodeLogAggregator

        w = FakeWriter(tmp_path / "spool" / "nojob")
        w.log("kept")
        w.close()
        agg = NodeLogAggregator(str(tmp_path / "logs"), str(tmp_path / "spool"), "n.log", 1, False)
        assert agg.aggregator._otlp is None
        agg.start_aggregator()
        agg.shutdown()
        assert messages(tmp_path / "logs" / "n.log") == ["kept"]
        err = capfd.readouterr().err
        assert "OTLP export off: OTEL_EXPORTER_OTLP_ENDPOINT='localhost:4318'" in err
    finally:
        clear_identity()
