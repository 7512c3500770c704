"""Where the reader goes on after a live spool file was cut under it (truncated, then
perhaps written again): the writer numbers its records, so the records already read are
known by their sequence numbers (``key``), and what lies between is reported, never
read twice.
"""

from __future__ import annotations

from typing import Any

import orjson

from nvrx_otel import record as rec
from nvrx_otel.aggregator import reports


def unusable_header(line: bytes) -> bool:
    """A header whose fields do not have their types (it is ignored, not a lost record)."""
    try:
        d = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(d, dict) and d.get("v") == rec.SCHEMA_VERSION and d.get("k") == "hdr"


def _seq(d: dict[str, Any]) -> int:
    """The writer's sequence number of ``d`` (-1 when it has none)."""
    key = d.get("key")
    if not isinstance(key, str) or d.get("lg") == reports.LOGGER:
        return -1
    try:
        return rec.seq_of(key)
    except ValueError:
        return -1


def last_seq(
    records: list[dict[str, Any]], spans: list[dict[str, Any]] | None, default: int
) -> int:
    """The highest sequence number among the last records read (the writer counts up)."""
    best = default
    for d in reversed(records):
        seq = _seq(d)
        if seq >= 0:
            best = max(best, seq)
            break
    if spans:
        best = max(best, _seq(spans[-1]))
    return best


def resync(data: bytes, upto: int) -> tuple[int, int, int]:
    """After a truncation: how many leading bytes of ``data`` hold lines already read
    (records with a sequence number up to ``upto``, and lines before them), the sequence
    number of the first record after them (-1 when ``data`` holds none yet), and how many
    lines between are not records (the normal reading reports those as corrupt)."""
    pos = 0
    stop = -1  # start of the first line after the last record read before
    bad = 0
    while True:
        cut = data.find(b"\n", pos)
        if cut < 0:
            return (pos if stop < 0 else stop), -1, bad
        try:
            d = rec.decode(data[pos:cut])
        except ValueError:
            if cut > pos and not unusable_header(data[pos:cut]):
                bad += 1
            if stop < 0:
                stop = pos
            pos = cut + 1
            continue
        seq = -1 if d["k"] == rec.KIND_HEADER else _seq(d)
        if seq > upto:
            return (pos if stop < 0 else stop), seq, bad
        stop, bad = -1, 0  # lines before a record read before were read before too
        pos = cut + 1
