"""The one table of log levels: names, stdlib and loguru numbers, OTel severity numbers.

Every front end (the stdlib fast path and ``SpoolHandler``, the loguru bridge, the console)
and the aggregator's OTLP encoder take levels from here, so one level name has one
severity whichever front end wrote it. stdlib and loguru give every name in the table the
same number, so a level is found by its number as well as by its name: a stdlib level 25
registered as ``SUCCESS`` and loguru's ``SUCCESS`` are both OTel INFO2 (10).

A number between two named levels (a custom level of either front end) maps into the OTel
range between their severities, never past the next name up, so custom levels keep their
order and never fall to UNSPECIFIED (0). Everything here is worked out once; the hot
paths keep their own per-level caches filled from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Final


@dataclass(frozen=True)
class Level:
    """One named level."""

    name: str
    stdlib: int | None
    """Its number in stdlib ``logging`` (None: stdlib has no such level built in)."""
    loguru: int
    """Its number in loguru (the same as stdlib's where both have it)."""
    severity: int
    """Its OTel severity number (``SeverityNumber``)."""
    style: str
    """How the console shows its name (a Rich style)."""


LEVELS: Final = (
    Level("TRACE", None, 5, 1, "bold cyan"),
    Level("DEBUG", 10, 10, 5, "bold blue"),
    Level("INFO", 20, 20, 9, "bold"),
    Level("SUCCESS", None, 25, 10, "bold green"),  # OTel INFO2
    Level("WARNING", 30, 30, 13, "bold yellow"),
    Level("ERROR", 40, 40, 17, "bold red"),
    Level("CRITICAL", 50, 50, 21, "bold white on red"),
)
"""Every named level, lowest first."""

ALIASES: Final = {"WARN": "WARNING", "FATAL": "CRITICAL"}
"""stdlib's other spellings of a named level."""

STREAMS: Final = {"STDOUT": 9, "STDERR": 9}
"""The level names of captured output lines (``watch``), with their severity (INFO): what a
program writes to stderr is not by itself a warning."""

_NAMED: Final = {lv.name: lv for lv in LEVELS}
BY_NAME: Final = {**_NAMED, **{alias: _NAMED[name] for alias, name in ALIASES.items()}}
"""Each level by its name and by its aliases."""

SEVERITY_BY_LEVEL: Final[dict[str, int]] = {name: lv.severity for name, lv in BY_NAME.items()}
"""OTel severity number of every level name (aliases included)."""

SEVERITY_MAX: Final = 24
"""The highest OTel severity (FATAL4)."""

_ANCHORS: Final = tuple((lv.loguru, lv.severity) for lv in LEVELS)


def severity_of(levelno: int) -> int:
    """OTel severity number of a stdlib/loguru numeric level (named or custom).

    A named level's number gives its severity; a number between two named ones gives a
    severity between theirs (one step per third of the gap, at most up to one below the
    next name's); below TRACE is TRACE, above CRITICAL rises to FATAL4.
    """
    if 0 <= levelno < len(_SEVERITIES):
        return _SEVERITIES[levelno]
    return _severity_of(levelno)


def _severity_of(levelno: int) -> int:
    first_no, first_sev = _ANCHORS[0]
    if levelno <= first_no:
        return first_sev
    for (lo_no, lo_sev), (hi_no, hi_sev) in pairwise(_ANCHORS):
        if levelno < hi_no:
            room = hi_sev - lo_sev - 1
            step = max(1, (hi_no - lo_no) // 3)
            return lo_sev + min(room, (levelno - lo_no) // step)
    last_no, last_sev = _ANCHORS[-1]
    return last_sev + min(SEVERITY_MAX - last_sev, (levelno - last_no) // 3)


_SEVERITIES: Final = tuple(_severity_of(n) for n in range(64))
"""Precomputed for the numbers levels use (a tuple index per call)."""


def severity_for(name: str, levelno: int) -> int:
    """OTel severity of a level with ``name`` and number ``levelno``: a named level's
    severity, else the one its number gives (custom levels)."""
    lv = BY_NAME.get(name)
    return lv.severity if lv is not None else severity_of(levelno)


def severity_of_name(name: object) -> int:
    """OTel severity of a level name (any case), 0 (UNSPECIFIED) for anything else: for
    records that carry only a level name."""
    if not isinstance(name, str):
        return 0
    lv = BY_NAME.get(name.upper())
    return STREAMS.get(name.upper(), 0) if lv is None else lv.severity


def level_of_severity(severity: int) -> Level | None:
    """The named level whose severity is exactly ``severity``, if any."""
    for lv in LEVELS:
        if lv.severity == severity:
            return lv
    return None


def names_text() -> str:
    """The level names, lowest first, for messages (``TRACE, DEBUG, ...``)."""
    return ", ".join(lv.name for lv in LEVELS)
