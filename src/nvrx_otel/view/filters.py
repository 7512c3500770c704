"""What ``nvrx-otel logs`` shows: ranks, nodes, minimum level, trace id, time range.

Each parser turns a bad value into a ``ValueError`` whose message names it (argparse
shows it as a usage error). Times: ISO 8601 (``2024-01-15T10:30``, ``2024-01-15
10:30:45.5``, with ``Z`` or ``+02:00``; without an offset it is local time, ``TZ``) or
relative to now (``10m``, ``90s``, ``2h``, ``1d``: that long ago; ``-10m`` the same, written
``--since=-10m`` on the command line, where a lone ``-10m`` reads as an option).
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from nvrx_otel.levels import BY_NAME, SEVERITY_MAX, names_text
from nvrx_otel.view.entry import Entry

_RELATIVE: Final = re.compile(r"-?(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhd])")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_NS: Final = 1_000_000_000

RankSet = tuple[tuple[int, int], ...]
"""Inclusive ranges of ranks."""


def parse_ranks(text: str) -> RankSet:
    """``0-3,7`` → ((0, 3), (7, 7))."""
    out: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            msg = f"bad rank list {text!r}: use numbers and ranges, e.g. 0-3,7"
            raise ValueError(msg) from None
        if a < 0 or b < a:
            raise ValueError(f"bad rank range {part!r} in {text!r}")
        out.append((a, b))
    return tuple(out)


def in_ranks(rank: int | None, ranks: RankSet) -> bool:
    return rank is not None and any(lo <= rank <= hi for lo, hi in ranks)


def parse_level(text: str) -> int:
    """Minimum severity of a level name (any case) or OTel severity number (1-24)."""
    name = text.strip().upper()
    lv = BY_NAME.get(name)
    if lv is not None:
        return lv.severity
    if name.isdigit() and 1 <= int(name) <= SEVERITY_MAX:
        return int(name)
    raise ValueError(f"unknown level {text!r} (known: {names_text()}, or a severity 1-24)")


def parse_time(text: str, now_ns: int | None = None) -> int:
    """ns since the epoch of an ISO time (local time without an offset) or of a time
    relative to now (``-10m``: ten minutes ago)."""
    stripped = text.strip()
    m = _RELATIVE.fullmatch(stripped)
    if m is not None:
        now = time.time_ns() if now_ns is None else now_ns
        return now - int(float(m["n"]) * _UNIT_S[m["unit"]] * _NS)
    iso = stripped.replace(",", ".")
    if iso.endswith(("Z", "z")):
        iso = iso[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(
            f"bad time {text!r}: use ISO 8601 (2024-01-15T10:30:45, local time unless it "
            "has an offset) or relative to now (-10m, -2h, -1d)"
        ) from None
    seconds = when.timestamp()  # naive: local time
    return int(seconds) * _NS + round((seconds - int(seconds)) * 1e6) * 1000


def parse_trace(text: str) -> str:
    """A trace id (32 hex digits) or a prefix of one, lowercased."""
    t = text.strip().lower()
    if not t or len(t) > 32 or any(c not in "0123456789abcdef" for c in t):
        raise ValueError(f"bad trace id {text!r}: hex digits (all 32, or a prefix)")
    return t


@dataclass(frozen=True)
class Filters:
    """The record filters; an unset one lets everything through. A record whose rank (or
    node, trace id) is unknown fails a filter on it; one the aggregator collapsed
    (``--dedup-window``) passes a rank filter when any of the ranks it stands for does."""

    ranks: RankSet | None = None  # workload ranks
    infra_ranks: RankSet | None = None
    nodes: tuple[str, ...] | None = None  # names or glob patterns
    min_severity: int = 0
    trace: str | None = None  # id or prefix
    since_ns: int | None = None
    until_ns: int | None = None

    @property
    def active(self) -> bool:
        return self != Filters()

    def __call__(self, e: Entry) -> bool:
        if self.since_ns is not None and e.ts_ns < self.since_ns:
            return False
        if self.until_ns is not None and e.ts_ns > self.until_ns:
            return False
        if e.severity < self.min_severity:
            return False
        if self.ranks is not None and not in_ranks(e.rank, self.ranks):
            c = e.collapsed  # a record the aggregator collapsed stands for all its ranks
            if c is None or not any(in_ranks(r, self.ranks) for r in c.ranks):
                return False
        if self.infra_ranks is not None and not in_ranks(e.irank, self.infra_ranks):
            return False
        if self.nodes is not None and not _node_in(e.node, self.nodes):
            return False
        return self.trace is None or (e.trace_id is not None and e.trace_id.startswith(self.trace))


def _node_in(node: str | None, patterns: tuple[str, ...]) -> bool:
    if node is None:
        return False
    return any(node == p or fnmatch.fnmatchcase(node, p) for p in patterns)
