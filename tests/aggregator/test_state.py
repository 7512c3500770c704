"""The committed state: the job directory's file, or the fallback next to the node log
while the job directory cannot be written; the newer one (commit counter) is loaded."""

from __future__ import annotations

from pathlib import Path

from nvrx_otel.aggregator import state as st


def test_fallback_state_is_used_while_the_job_directory_cannot_be_written(
    tmp_path: Path,
) -> None:
    job, logs = tmp_path / "job", tmp_path / "logs"
    job.mkdir()
    logs.mkdir()
    fallback = logs / ".node.log.job.state.json"
    assert st.commit(job, st.State(totals={"written": 1}, seq=1), fallback) is None
    assert not fallback.exists()
    # A job directory that cannot take the state (here: moved away) sends it to the fallback.
    job.rename(tmp_path / "away")
    error = st.commit(job, st.State(totals={"written": 2}, seq=2), fallback)
    assert isinstance(error, OSError)
    (tmp_path / "away").rename(job)
    loaded = st.load(job, fallback)
    assert loaded is not None and (loaded.seq, loaded.totals) == (2, {"written": 2})
    # Back in the job directory: the fallback is stale and removed.
    assert st.commit(job, st.State(totals={"written": 3}, seq=3), fallback) is None
    assert not fallback.exists()
    loaded = st.load(job, fallback)
    assert loaded is not None and loaded.seq == 3
    assert not list(logs.iterdir()) and not list(job.glob("*.tmp"))


def test_unusable_job_directory_state_falls_back_to_a_good_fallback(tmp_path: Path) -> None:
    job, fallback = tmp_path / "job", tmp_path / "fallback.json"
    job.mkdir()
    st.state_path(job).write_bytes(b"{torn")
    assert st.commit(tmp_path / "gone", st.State(seq=4), fallback) is not None
    loaded = st.load(job, fallback)
    assert loaded is not None and loaded.seq == 4
