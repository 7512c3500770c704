"""The per-record size cap: a line over it is cut to fit and stays one valid record.

Only the writer's slow path calls this (a line over the cap never passes the lock-free
check, see ``SpoolWriter._refresh_limit``). Every string longer than some length ``n``
(the message, exception text, attribute values, span event texts; found by bisection, at
least ``_MIN_KEEP`` characters so ids, keys and names stay whole) keeps its first ``n``
characters followed by ``… [truncated <bytes> bytes]``. If the record still does not fit
(huge numbers of small values), its attributes, events and links give way to a marker
in the message; a record that fits in no way is dropped (the caller counts it).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

MARK: Final = "… [truncated %d bytes]"
"""Appended to every string the cap cut; the number is the UTF-8 bytes removed."""
_MIN_KEEP: Final = 64
_BULKY: Final = ("attrs", "events", "links", "exc")


def _cut(value: Any, keep: int) -> Any:
    if isinstance(value, str):
        if len(value) <= keep:
            return value
        lost = len(value[keep:].encode("utf-8", "surrogatepass"))
        return value[:keep] + MARK % lost
    if isinstance(value, dict):
        return {k: _cut(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, keep) for v in value]
    return value


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest(v) for v in value), default=0)
    return 0


def _encode(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def fit(line: bytes, cap: int) -> bytes | None:
    """``line`` (one encoded record ending in ``\\n``) cut to at most ``cap`` bytes, or
    None when it cannot be (not a JSON object, or too big whatever is cut)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    lo, hi = _MIN_KEEP, _longest(record)
    best = _encode(_cut(record, lo)) if hi > lo else None
    if best is None or len(best) > cap:
        return _strip(record, line, cap)
    while lo < hi:  # the longest ``keep`` whose line fits
        mid = (lo + hi + 1) // 2
        candidate = _encode(_cut(record, mid))
        if len(candidate) <= cap:
            lo, best = mid, candidate
        else:
            hi = mid - 1
    return best


def _strip(record: dict[str, Any], line: bytes, cap: int) -> bytes | None:
    """The last resort: bulky fields replaced by a marker on the message."""
    slim = {k: v for k, v in record.items() if k not in _BULKY}
    msg = slim.get("msg")
    mark = MARK % len(line)
    slim["msg"] = (msg[:_MIN_KEEP] if isinstance(msg, str) else "") + mark
    out = _encode(_cut(slim, _MIN_KEEP))
    return out if len(out) <= cap else None
