"""NVRx's in-process API: ``NodeLogAggregator(log_dir, temp_dir, log_file, max_file_size,
en_chrono_ord)`` with ``start_aggregator()`` / ``shutdown()``."""

from __future__ import annotations

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
