"""Node-log text → :class:`~nvrx_otel.view.entry.Entry` (the grammar of
:mod:`nvrx_otel.nodeline`, read back).

A record is one line; lines indented by four spaces that follow it are more of its
message (or its traceback) and belong to it. ``?`` ranks become ``None``; a trailing
`` [trace_id=<32 hex> span_id=<16 hex>]`` gives the record's ids; the aggregator's loss
reports (``dropped <N> records from rank ...``) carry a :class:`~nvrx_otel.view.entry.Loss`,
and a record the aggregator collapsed (`` [repeated <N>x across ranks <ranges>]`` at the end
of its line) a :class:`~nvrx_otel.view.entry.Collapsed`.
Times are the node's local time as written; they are read in this process's local time
zone (``TZ``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from sys import intern
from typing import Final

from nvrx_otel.levels import severity_of_name
from nvrx_otel.nodeline import parse_ranges
from nvrx_otel.view.entry import LOSS_FILE, Collapsed, Entry, Loss

LINE: Final = re.compile(
    r"(?P<time>\S{10} \S{8}),(?P<ms>\S{3}) \[(?P<lvl>[^\]]*)\] \[(?P<node>[^\]]*)\] "
    r"\[workload:(?P<r>[^(\s]*)\((?P<lr>[^)\s]*)\) infra:(?P<ir>[^(\s]*)\((?P<ilr>[^)\s]*)\)\] "
    r"(?P<file>.*?):(?P<line>\d+|\?) (?P<msg>.*?)"
    r"(?: \[trace_id=(?P<trace>[0-9a-f]{32}) span_id=(?P<span>[0-9a-f]{16}|\?)\])?"
    r"(?: \[repeated (?P<rep>\d+)x across ranks (?P<reps>[0-9,-]+|\?)\])?"
)
"""One record line (matched in full)."""
INDENT: Final = "    "
LOSS: Final = re.compile(
    r"(?P<what>dropped|corrupt) (?P<n>\d+) records from rank \S+ pid \S+ between .+: (?P<why>\S+)"
)
_SECONDS: dict[str, int | None] = {}
_SECONDS_MAX: Final = 4096
_NS: Final = 1_000_000_000

Malformed = Callable[[str, int, str], None]
"""Called with (path, line number, the line) for a line that is not the grammar."""


def local_seconds(text: str) -> int | None:
    """Seconds since the epoch of ``YYYY-MM-DD HH:MM:SS`` read as local time (None when
    it is no such time, e.g. the ``????-??-??`` of a record without one)."""
    sec = _SECONDS.get(text, -1)
    if sec != -1:
        return sec
    try:
        sec = int(time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S")))
    except (ValueError, OverflowError):
        sec = None
    if len(_SECONDS) >= _SECONDS_MAX:
        _SECONDS.clear()
    _SECONDS[text] = sec
    return sec


_RANKS: Final[dict[str, int | None]] = {"?": None, **{str(n): n for n in range(4096)}}
"""Rank texts seen in practice, read without ``int()``; ``?`` is unknown."""
_SEVERITY: dict[str, int] = {}


def _rank(text: str) -> int | None:
    rank = _RANKS.get(text, -1)
    if rank != -1:
        return rank
    try:
        return int(text)
    except ValueError:
        return None


def _severity(level: str) -> int:
    sev = _SEVERITY.get(level)
    if sev is None:
        sev = severity_of_name(level)
        if len(_SEVERITY) < 256:
            _SEVERITY[level] = sev
    return sev


def parse_head(line: str, path: str, number: int, last_ts: int) -> Entry | None:
    """The entry of a record line (its first line only), or None when ``line`` is not
    one. A record without a readable time gets ``last_ts`` (it stays where it was)."""
    m = LINE.fullmatch(line)
    if m is None:
        return None
    t, ms, lvl, node, r, lr, ir, ilr, file, line_no, msg, trace, span, rep, reps = m.groups()
    sec = local_seconds(t)
    ts = last_ts if sec is None or not ms.isdigit() else sec * _NS + int(ms) * 1_000_000
    lvl = intern(lvl)
    file = intern(file)
    loss = None
    if file == LOSS_FILE:
        lm = LOSS.fullmatch(msg)
        if lm is not None:
            loss = Loss(lm["what"], int(lm["n"]), lm["why"])
    # positional, in the field order of Entry (keywords cost a third of the call)
    return Entry(
        ts,
        lvl,
        _severity(lvl),
        intern(node),
        _rank(r),
        _rank(lr),
        _rank(ir),
        _rank(ilr),
        file,
        None if line_no == "?" else int(line_no),
        msg,
        trace,
        None if span == "?" else span,
        loss,
        path,
        number,
        None,  # cycle: not in the node log's grammar
        None,  # observed_ns: OTLP only
        None if rep is None else collapsed(int(rep), reps),
    )


def collapsed(count: int, ranks: object) -> Collapsed | None:
    """A :class:`Collapsed` from a count and a ranges text (no ranks when it is none)."""
    try:
        numbers = tuple(parse_ranges(ranks)) if isinstance(ranks, str) else ()
    except ValueError:
        numbers = ()
    return Collapsed(count, numbers) if count > 1 else None


class NodeLogParser:
    """Lines of one node log in, entries out. A record is complete when the next record
    line comes or :meth:`flush` says the file ends (or, when following, has paused)."""

    def __init__(self, path: str, malformed: Malformed) -> None:
        self.path = path
        self.malformed = malformed
        self.pending: Entry | None = None
        self.more: list[str] = []
        self.last_ts = 0

    def feed(self, line: str, number: int) -> Entry | None:
        """Take line ``number`` (without its newline); the record it completes, if any."""
        if line.startswith(INDENT):
            if self.pending is not None:
                self.more.append(line[4:])
            else:
                self.malformed(self.path, number, line)
            return None
        head = parse_head(line, self.path, number, self.last_ts)
        if head is None:
            self.malformed(self.path, number, line)
            return None
        self.last_ts = head.ts_ns
        done = self.flush()
        self.pending = head
        return done

    def flush(self) -> Entry | None:
        """The record being read, complete as it stands."""
        entry = self.pending
        if entry is not None and self.more:
            entry.text = "\n".join((entry.text, *self.more))
            self.more = []
        self.pending = None
        return entry


def read_node_log(
    lines: Iterable[tuple[int, str]], path: str, malformed: Malformed
) -> Iterator[Entry]:
    """The entries of a node log's numbered lines, in file order."""
    parser = NodeLogParser(path, malformed)
    feed = parser.feed
    for number, line in lines:
        entry = feed(line, number)
        if entry is not None:
            yield entry
    last = parser.flush()
    if last is not None:
        yield last
