"""What the pictures draw: per rank, its spans as bars (every name: the conventions' and
the program's own, :data:`CODES_MAX` names at most, further ones as one), in bounded
memory. A rank keeps at most :data:`BARS_MAX` bars; when it has more, neighbouring bars
merge pairwise (the picture coarsens, it never grows)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Final

from nvrx_otel import semconv
from nvrx_otel.report.otlp import Span

BARS_MAX: Final = 256
NAMES: Final = tuple(semconv.SPANS)
_CODE: Final = {name: i for i, name in enumerate(NAMES)}
TRUNCATED: Final = 1 << 8
ERROR: Final = 1 << 9
CODES_MAX: Final = 255
OTHER: Final = "(other span names)"


class Timeline:
    """Bars per workload rank: ``(start ns, end ns, code)`` where ``code`` is the index
    of the span name in :attr:`names` (the conventions' :data:`NAMES` first) with the
    :data:`TRUNCATED` / :data:`ERROR` bits."""

    def __init__(self) -> None:
        self.rows: dict[int, array[int]] = {}
        self.nodes: dict[int, str | None] = {}
        self.names: list[str] = list(NAMES)  # code -> span name
        self._codes: dict[str, int] = dict(_CODE)

    def code(self, name: str) -> int:
        """The code of span name ``name`` (a new one while there are codes left)."""
        code = self._codes.get(name)
        if code is None:
            if len(self.names) < CODES_MAX:
                code = len(self.names)
                self.names.append(name)
            else:
                code = self._codes.get(OTHER, -1)
                if code < 0:  # the last code: every further name
                    code = len(self.names) - 1
                    self.names[code] = OTHER
            self._codes[name] = code
        return code

    def rank(self, rank: int, node: str | None) -> None:
        """A rank with log records (a row even without spans)."""
        if rank not in self.nodes:
            self.nodes[rank] = node

    def span(self, s: Span) -> None:
        if s.rank is None:
            return
        code = self.code(s.name)
        if s.truncated:
            code |= TRUNCATED
        if s.error:
            code |= ERROR
        row = self.rows.get(s.rank)
        if row is None:
            row = self.rows[s.rank] = array("q")
            self.nodes.setdefault(s.rank, s.node)
        row.extend((s.start_ns, s.ts_ns, code))
        if len(row) >= 3 * BARS_MAX:
            self.rows[s.rank] = _coarsen(row)

    def bars(self, rank: int) -> Iterator[tuple[int, int, int]]:
        row = self.rows.get(rank, array("q"))
        for i in range(0, len(row), 3):
            yield row[i], row[i + 1], row[i + 2]


def _coarsen(row: array[int]) -> array[int]:
    """Half as many bars: neighbours (in start order) merged, the longer one's code kept
    (an error or truncation of either is kept too)."""
    bars = sorted((row[i], row[i + 1], row[i + 2]) for i in range(0, len(row), 3))
    out = array("q")
    for i in range(0, len(bars) - 1, 2):
        (s1, e1, c1), (s2, e2, c2) = bars[i], bars[i + 1]
        code = (c1 if e1 - s1 >= e2 - s2 else c2) & 0xFF
        out.extend((min(s1, s2), max(e1, e2), code | ((c1 | c2) & (TRUNCATED | ERROR))))
    if len(bars) % 2:
        out.extend(bars[-1])
    return out
