"""The identity-field table: the writer's spliced identity, the aggregator's reports and the
resource attributes all follow it, and the record bytes are what they always were."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from nvrx_otel import identity
from nvrx_otel.aggregator import reports
from nvrx_otel.identity import IDENTITY_FIELDS, Identity, clear_identity, set_identity
from nvrx_otel.spool.writer import SpoolWriter

FULL = {
    "node_id": "n1",
    "job_id": "j1",
    "workload_rank": 3,
    "workload_local_rank": 1,
    "infra_rank": 7,
    "infra_local_rank": 0,
}


@pytest.fixture(autouse=True)
def _own_identity() -> Iterator[None]:
    clear_identity()
    yield
    clear_identity()


def _line(tmp_path: Path) -> bytes:
    writer = SpoolWriter(tmp_path)
    try:
        writer.emit({"v": 1, "k": "log", "ts": 5, "msg": "m"})
    finally:
        writer.close()
    (path,) = tmp_path.glob("*.jsonl")
    return path.read_bytes().splitlines()[-1]


def test_spliced_identity_bytes_are_unchanged(tmp_path: Path) -> None:
    set_identity(**FULL)
    pid = os.getpid()
    line = _line(tmp_path / "full")
    assert line.startswith(b'{"v":1,"k":"log","ts":5,"msg":"m","key":"')
    assert line.endswith(
        b'","node":"n1","pid":%d,"job":"j1","rank":3,"lrank":1,"irank":7,"ilrank":0}' % pid
    )
    set_identity(job_id=None, workload_rank=None, workload_local_rank=None, infra_rank=None)
    assert _line(tmp_path / "some").endswith(b'","node":"n1","pid":%d,"ilrank":0}' % pid)


def test_the_table_names_identity_attributes_and_resource_keys() -> None:
    names = {f.name for f in fields(Identity)}
    assert [f.key for f in IDENTITY_FIELDS] == ["node", "job", "rank", "lrank", "irank", "ilrank"]
    ident = identity.resolve(environ={}, host_name="h", pid=9, **FULL)
    attrs = ident.attributes()
    for f in IDENTITY_FIELDS:
        assert f.attr in names and f.meaning
        assert attrs[f.resource_key] == getattr(ident, f.attr)
    fields_ = identity.record_fields(ident)
    assert fields_ == {f.key: FULL[f.attr] for f in IDENTITY_FIELDS}
    assert identity.record_fields_from_resource(attrs) == fields_


def test_reports_take_identity_from_the_table() -> None:
    ident = identity.resolve(environ={}, host_name="h", pid=9, **FULL)
    record = {"k": "log", "msg": "m", "pid": 9, **identity.record_fields(ident)}
    assert reports.identity_of(record) == identity.record_fields(ident)
    header = {"k": "hdr", "res": ident.attributes()}
    assert reports.identity_from_header(header) == identity.record_fields(ident)
    assert reports.identity_from_header({"k": "hdr", "res": "x"}) == {}
