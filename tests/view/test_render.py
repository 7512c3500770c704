"""Plain text is the node log's grammar (control characters escaped), JSON one object per
record."""

from __future__ import annotations

import orjson

from nvrx_otel.nodeline import format_records
from nvrx_otel.view.dedup import Dedup, Group
from nvrx_otel.view.render import as_dict, plain
from nvrx_otel.view.sources import read_node_log
from tests.view.viewkit import BASE_NS, entry, record


def test_plain_text_of_a_node_log_record_is_the_line_it_came_from() -> None:
    text = format_records(
        [
            record(BASE_NS, "one", trace_id="ab" * 16, span_id="cd" * 8),
            record(BASE_NS + 1_000_000, "two\n  indented", lvl="ERROR", exc="Traceback\nE: x"),
            record(BASE_NS + 2_000_000, "launcher", rank=None, lrank=None),
        ],
        "node-1",
    )
    entries = read_node_log(enumerate(text.splitlines(), 1), "p", lambda *a: None)
    assert "".join(plain(Group(e)) for e in entries) == text


def test_control_characters_from_otlp_are_escaped() -> None:
    e = entry(BASE_NS, "\x1b[31mred\x1b[0m\nnext \x07 line", node="n\x1b")
    out = plain(Group(e))
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[31mred\\x1b[0m" in out and "    next \\x07 line\n" in out


def test_repeat_note_ends_the_first_line() -> None:
    d = Dedup()
    groups = [
        *d.push(entry(0, "same\nsecond", rank=0)),
        *d.push(entry(1, "same\nsecond", rank=1)),
        *d.flush(),
    ]
    first, second = plain(groups[0]).splitlines()
    assert first.endswith("same [repeated 2x across ranks 0-1]") and second == "    second"


def test_json_object_per_record() -> None:
    d = Dedup()
    groups = [
        *d.push(entry(BASE_NS, "x", rank=0, trace_id="ab" * 16)),
        *d.push(entry(BASE_NS, "x", rank=5)),
        *d.flush(),
    ]
    doc = orjson.loads(orjson.dumps(as_dict(groups[0])))
    assert doc["message"] == "x" and doc["ts_ns"] == BASE_NS and doc["trace_id"] == "ab" * 16
    assert doc["repeated"] == {
        "count": 2,
        "ranks": [0, 5],
        "infra_ranks": [],
        "unknown_ranks": 0,
        "nodes": ["n"],
    }
    assert doc["time"].startswith("2023-11-1")
    assert "repeated" not in as_dict(Group(entry(0)))
