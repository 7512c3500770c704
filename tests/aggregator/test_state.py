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


def test_a_state_written_before_the_otlp_progress_was_typed_resumes_the_same(
    tmp_path: Path,
) -> None:
    """The OTLP sink's progress has the JSON shape it had as an untyped document: a state
    an older aggregator committed is read into the typed one and written back unchanged."""
    import orjson

    writer = {
        "last_ts": 17, "open": {"00000000000000aa": {"k": "span_start", "ts": 5}},
        "res": {"service.name": "t"}, "id": {"rank": 3}, "budget": 8192, "max": 4096,
        "reports": [{"k": "log", "msg": "dropped 2 records"}],
    }  # fmt: skip
    old = {
        "v": 1, "n": 9, "files": {"a.jsonl": [11, 300, 7]}, "totals": {"written": 4},
        "log": None,
        "otlp": {"cursors": {"a.jsonl": [11, 200]}, "writers": {"w1": writer}, "skipped": 6},
    }  # fmt: skip
    st.state_path(tmp_path).write_bytes(orjson.dumps(old))
    loaded = st.load(tmp_path)
    assert loaded is not None
    progress = loaded.sinks["otlp"]
    assert progress.cursors == {"a.jsonl": (11, 200)} and progress.skipped == 6
    w = progress.writers["w1"]
    assert (w.budget, w.max_file, w.last_ts, w.identity) == (8192, 4096, 17, {"rank": 3})
    assert len(w.pending_reports) == 1 and list(w.open_spans) == ["00000000000000aa"]
    # One cursor served the endpoint and the JSON files then: each sink resumes from it.
    assert loaded.sinks["otlp_json"] is progress
    doc = orjson.loads(st.encode(loaded))
    assert doc["otlp"] == doc["otlp_json"] == old["otlp"]
    assert {k: v for k, v in doc.items() if k != "otlp_json"} == old
    # Without OTLP then, an aggregator with OTLP now starts its cursors at every file's start.
    del old["otlp"]
    st.state_path(tmp_path).write_bytes(orjson.dumps(old))
    loaded = st.load(tmp_path)
    assert loaded is not None and loaded.sinks == {}
