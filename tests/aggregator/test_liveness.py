"""When the aggregator takes a writer for gone: never while it lives on in a file the loop
has not listed yet, and never for spans whose file the OTLP side has not been shown."""

from __future__ import annotations

from pathlib import Path

from nvrx_otel import record as rec
from nvrx_otel.aggregator.otlp_files import died_in_spans, new_cursor
from nvrx_otel.aggregator.spooldir import SpoolDir
from nvrx_otel.aggregator.state import WriterState
from nvrx_otel.spool.paths import SpoolFileName
from nvrx_otel.spool.writer import SpoolWriter


def _fill_first_file(w: SpoolWriter) -> None:
    path = w.current_path
    while w.current_path == path:
        w.emit({"k": rec.KIND_LOG, "msg": "x" * 200, "ts": 1})


def test_writer_that_rotated_after_the_scan_is_not_taken_for_gone(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path, max_file_size=4096)
    w.emit({"k": rec.KIND_LOG, "msg": "first", "ts": 1})
    spool = SpoolDir(tmp_path)
    spool.scan()
    ((writer, files),) = spool.writers()
    assert len(files) == 1
    # The writer moves to its next file (named and locked before the first is unlocked)
    # between the loop's listing and its liveness probe.
    _fill_first_file(w)
    spool.new_cycle()
    assert not spool.writer_gone(writer), "a writer that lives on in its next file"
    w.close()
    spool.new_cycle()
    spool.scan()
    assert spool.writer_gone(writer)


def test_span_of_a_writer_the_sink_has_no_file_view_of_yet_is_not_truncated() -> None:
    """The loop hands a batch (with a span start) to the OTLP sink before its next commit
    shows the sink the file: the sink has a cursor there, and the span is not cut."""
    name = SpoolFileName("w1", 0, 4242, "proc")
    state = WriterState(open_spans={"00f067aa0ba902b7": {"k": "span_start", "ts": 1}})
    cursors = {name.name: new_cursor(name.name, name, 7)}
    assert died_in_spans([], {"w1": state}, lambda v: 0, cursors) == []


def test_span_of_a_writer_whose_files_are_all_consumed_and_deleted_is_truncated() -> None:
    """A rank killed inside a span: once its files are exported and deleted the sink has
    neither a view nor a cursor of them, and the span is exported ended, truncated."""
    state = WriterState(open_spans={"00f067aa0ba902b7": {"k": "span_start", "ts": 1}})
    (died,) = died_in_spans([], {"w1": state}, lambda v: 0, {})
    assert died[0] == "w1" and died[2] == [{"k": "span_start", "ts": 1}]
