"""The decoder refuses records whose fields do not have their documented types."""

from __future__ import annotations

from typing import Any

import pytest

from nvrx_otel import record as rec

LOG: dict[str, Any] = {
    "v": 1, "k": "log", "ts": 1, "sev": 9, "lvl": "INFO", "lg": "x", "msg": "m",
    "path": "/a.py", "line": 3, "fn": "f", "pid": 1, "tid": 2, "tn": "Main", "key": "ab-1",
}  # fmt: skip
SPAN: dict[str, Any] = {
    "v": 1, "k": "span_end", "ts": 5, "start": 1, "trace_id": "ab" * 16, "span_id": "cd" * 8,
    "name": "s", "kind": 0, "events": [{"ts": 2, "name": "e", "attrs": {}}],
    "links": [{"trace_id": "ef" * 16, "span_id": "01" * 8}], "status": {"code": 0},
}  # fmt: skip


def _decodes(record: dict[str, Any]) -> bool:
    try:
        rec.decode(rec.encode(record))
    except ValueError:
        return False
    return True


def test_records_of_every_kind_as_writers_make_them_decode() -> None:
    header = {"v": 1, "k": "hdr", "w": "ab", "f": 0, "ts": 1, "pid": 1, "res": {}}
    drop = {"v": 1, "k": "drop", "ts": 1, "count": 3, "first_ts": 1, "last_ts": 2}
    assert _decodes(LOG) and _decodes(SPAN) and _decodes(header | {"budget": 9, "max": 3})
    assert _decodes(drop | {"reason": "budget"})
    assert _decodes(LOG | {"tn": None, "tid": None, "fn": None})  # stdlib leaves them unset
    assert _decodes(SPAN | {"k": "span_start"})


@pytest.mark.parametrize(
    "record",
    [
        LOG | {"ts": "x"},
        LOG | {"sev": "high"},
        LOG | {"sev": True},
        LOG | {"msg": 5},
        LOG | {"line": "12"},
        LOG | {"attrs": [1]},
        LOG | {"trace_id": "z" * 32, "span_id": "1" * 16},
        LOG | {"trace_id": "a" * 32},
        {k: v for k, v in LOG.items() if k != "ts"},
        SPAN | {"span_id": 7},
        SPAN | {"kind": 9},
        SPAN | {"events": [{"ts": "x"}]},
        SPAN | {"links": [{"trace_id": "a", "span_id": "b"}]},
        {"v": 1, "k": "hdr", "w": "ab", "f": 0, "ts": 1, "budget": "x"},
        {"v": 1, "k": "drop", "ts": 1, "count": "3"},
        {"v": 1, "k": "unknown", "ts": 1},
    ],
)
def test_a_wrong_typed_record_is_corrupt(record: dict[str, Any]) -> None:
    assert not _decodes(record)
    assert not rec.valid(record)
