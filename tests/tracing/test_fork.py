"""Fork safety on the spool path: children trace with their own pid and writer."""

from __future__ import annotations

import multiprocessing
import os
import warnings
from pathlib import Path

from opentelemetry import trace

from nvrx_otel import record as rec
from nvrx_otel.tracing import ft_span, setup_tracing
from tests.tracing.conftest import spans


def _child_work() -> None:
    with ft_span("run", cycle=1):
        pass


def _check_child(tmp_path: Path, child_pid: int, parent_span_id: str) -> None:
    records = spans(tmp_path)
    mine = [r for r in records if r["pid"] == os.getpid()]
    theirs = [r for r in records if r["pid"] == child_pid]
    assert [r["k"] for r in theirs] == ["span_start", "span_end"]
    assert {r["name"] for r in theirs} == {"nv.nvrx.ftl.run"}
    writer = {r["key"].split("-")[0] for r in theirs}
    assert len(writer) == 1 and writer.isdisjoint(r["key"].split("-")[0] for r in mine)
    assert [rec.seq_of(r["key"]) for r in theirs] == [0, 1]  # the child's writer counts from 0
    assert theirs[0]["parent_id"] == parent_span_id  # the context crossed the fork
    (header,) = [
        line for line in (tmp_path / "nojob").glob(f"*.p{child_pid}.*.jsonl")
    ]  # its own file, named with its pid
    assert header.read_bytes().startswith(b'{"v":1,"k":"hdr"')


def _fork(target: object) -> int:
    with warnings.catch_warnings():  # 3.12+ warns about fork with threads around
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            target()  # type: ignore[operator]
        finally:
            os._exit(0)
    return pid


def test_os_fork_child_writes_its_own_spans(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    with ft_span("cycle", cycle=1) as cycle:
        pid = _fork(_child_work)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _check_child(tmp_path, pid, f"{cycle.get_span_context().span_id:016x}")
    parent_ends = [r for r in spans(tmp_path, "span_end") if r["pid"] == os.getpid()]
    assert [r["name"] for r in parent_ends] == ["nv.nvrx.ftl.cycle"]


def test_multiprocessing_fork_child_writes_its_own_spans(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    with ft_span("cycle", cycle=1) as cycle, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        proc = multiprocessing.get_context("fork").Process(target=_child_work)
        proc.start()
        proc.join(30)
    assert proc.exitcode == 0 and proc.pid is not None
    _check_child(tmp_path, proc.pid, f"{cycle.get_span_context().span_id:016x}")
    assert trace.get_current_span() is trace.INVALID_SPAN or not (
        trace.get_current_span().get_span_context().is_valid
    )
