"""Fuzzing ``record.decode``: it raises nothing but ValueError, never turns a cut line
into a record, and gives back what ``record.encode`` wrote."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvrx_otel import record as rec

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

_text = st.text(st.characters(codec=None), max_size=40)  # lone surrogates included
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), _text,
                    st.floats(allow_nan=False, allow_infinity=False))  # fmt: skip
_attrs = st.dictionaries(_text, st.one_of(_scalar, st.lists(_scalar, max_size=3)), max_size=4)


@st.composite
def log_records(draw: st.DrawFn) -> dict[str, Any]:
    d: dict[str, Any] = {"v": 1, "k": "log", "ts": draw(st.integers(0, 2**63 - 1))}
    d["sev"] = draw(st.integers(1, 24))
    d["lvl"] = draw(st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "SUCCESS"]))
    d["msg"] = draw(st.text(st.characters(codec=None), max_size=200))
    d["key"] = f"{draw(st.integers(0, 2**64 - 1)):016x}-{draw(st.integers(0, 2**32)):x}"
    if draw(st.booleans()):
        d["attrs"] = draw(_attrs)
    if draw(st.booleans()):
        d["rank"] = draw(st.integers(0, 10**6))
    return d


def _clean(value: Any) -> Any:
    """What a value decodes to: lone surrogates replaced, ints out of 64-bit range as text."""
    return rec._scrub(value)


@FAST
@given(st.binary(max_size=300))
def test_random_bytes_decode_or_value_error(data: bytes) -> None:
    try:
        d = rec.decode(data)
    except ValueError:
        return
    assert isinstance(d, dict) and d["v"] == 1 and "k" in d


@FAST
@given(log_records())
def test_encoded_record_decodes_to_itself(record: dict[str, Any]) -> None:
    line = rec.encode(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line, whatever the text
    assert rec.decode(line) == _clean(record)
    assert rec.decode(line[:-1]) == _clean(record)


@FAST
@given(log_records(), st.data())
def test_a_cut_record_is_never_a_record(record: dict[str, Any], data: st.DataObject) -> None:
    """Truncated anywhere before its closing brace, a line is corrupt (ValueError)."""
    line = rec.encode(record)[:-1]
    cut = data.draw(st.integers(0, len(line) - 1))
    with pytest.raises(ValueError):
        rec.decode(line[:cut])


def test_a_cut_record_is_never_a_record_at_any_offset() -> None:
    """Every offset of one record with multi-byte text, escapes and nested attributes."""
    record = {"v": 1, "k": "log", "ts": 1, "msg": "é\u2028\ud800\"\\\n€𝄞", "key": "a-1",
              "attrs": {"a": [1, "x", None], "b": {"c": 1.5}}}  # fmt: skip
    line = rec.encode(record)[:-1]
    for cut in range(len(line)):
        with pytest.raises(ValueError):
            rec.decode(line[:cut])
    assert rec.decode(line)["msg"] == 'é\u2028\ufffd"\\\n€𝄞'


@FAST
@given(log_records(), st.binary(min_size=1, max_size=8), st.data())
def test_bytes_spliced_into_a_record_never_raise(
    record: dict[str, Any], junk: bytes, data: st.DataObject
) -> None:
    line = rec.encode(record)[:-1]
    at = data.draw(st.integers(0, len(line)))
    try:
        d = rec.decode(line[:at] + junk + line[at:])
    except ValueError:
        return
    assert isinstance(d, dict) and d["v"] == 1
