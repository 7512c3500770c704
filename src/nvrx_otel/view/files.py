"""Which files the view reads, in which order, and their lines (also as they grow).

A path may be a file, a directory or a glob. In a directory (not its subdirectories) the
view takes the node logs ``nvrx_log_<node>.log`` with their rotated backups ``.1``,
``.2``, … and the OTLP/JSON log files ``logs*.jsonl``: the aggregator's
``logs_<node>.jsonl`` and the collector file exporter's ``logs.jsonl`` with its rotated
backups ``logs-<time>-size.jsonl`` (``nvrx-otel report`` asks for the OTLP/JSON files of
both signals instead, ``logs*.jsonl`` and ``traces*.jsonl``, and no node logs). A file
named explicitly is read whatever its name (``*.jsonl`` and ``*.json`` as OTLP/JSON,
anything else as a node log). A directory holding none of these itself, such as the
output directory of ``nvrx-otel demo`` or ``nvrx-otel run``, is read from its ``logs/``
(else ``otlp/``) subdirectory; ``report`` reads its ``otlp/``.

The files of one log and its backups form one *stream*, read oldest first (``.2``,
``.1``, then the log; the collector's backups by the time in their name, then the live
file), so a stream is near time-ordered from its first record to its last.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final

NODE_LOG: Final = "nodelog"
OTLP_JSON: Final = "otlpjson"
_NODE_LOG_NAME: Final = re.compile(r"(?P<base>nvrx_log_.+\.log)(?:\.(?P<n>\d+))?")
_STAMP: Final = r"(?:-(?P<stamp>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(?:\.\d+)?)(?:-[a-z]+)?)?"
"""The time (and why: ``-size``) the collector's file exporter puts in a rotated backup's
name: ``logs-2026-12-01T06-00-03.960-size.jsonl``."""
LOGS: Final = ("logs",)
"""The OTLP/JSON files a directory gives ``nvrx-otel logs``: ``logs*.jsonl``."""
_ANY_OTLP: Final = re.compile(rf"(?P<stem>.+?){_STAMP}\.jsonl?")
_GLOB_CHARS: Final = re.compile(r"[*?\[]")
_CHUNK: Final = 1 << 20


class PathError(ValueError):
    """A path the view cannot read (its message is the one line to show)."""


@dataclass
class Stream:
    """One log and its rotated backups: ``files`` oldest first, the live one last."""

    kind: str
    key: str
    files: list[Path] = field(default_factory=list)


def _order(kind: str, path: Path) -> tuple[int, str]:
    """Sort key within a stream: older files first."""
    name = path.name
    if kind == NODE_LOG:
        m = _NODE_LOG_NAME.fullmatch(name)
        return (-int(m["n"]) if m and m["n"] else 0, "")
    m = _ANY_OTLP.fullmatch(name)
    return (0, m["stamp"]) if m and m["stamp"] else (1, "")


@dataclass(frozen=True)
class Wanted:
    """What a directory gives: node logs or not, and the OTLP/JSON files of which signals
    (file name prefixes: ``logs``, ``traces``)."""

    node_logs: bool = True
    signals: tuple[str, ...] = LOGS
    subdirs: tuple[str, ...] = ("logs", "otlp")
    """Where to look in a directory that holds none of these files itself: the output
    directory of ``nvrx-otel demo`` or ``nvrx-otel run`` (``logs/``, ``otlp/``); the first
    subdirectory that holds some is read."""

    @property
    def otlp_name(self) -> re.Pattern[str]:
        return _otlp_name(self.signals)

    def describe(self) -> str:
        otlp = ", ".join(f"{s}*.jsonl" for s in self.signals)
        what = (
            f"no node log (nvrx_log_*.log) or OTLP JSON ({otlp})"
            if self.node_logs
            else (f"no OTLP JSON ({otlp})")
        )
        return f"{what}, here or in {' or '.join(d + '/' for d in self.subdirs)}"


_NAMES: dict[tuple[str, ...], re.Pattern[str]] = {}


def _otlp_name(signals: tuple[str, ...]) -> re.Pattern[str]:
    pattern = _NAMES.get(signals)
    if pattern is None:
        prefix = "|".join(re.escape(s) for s in signals)
        pattern = _NAMES[signals] = re.compile(rf"(?P<stem>(?:{prefix})[^/]*?){_STAMP}\.jsonl")
    return pattern


def classify(path: Path, *, explicit: bool, wanted: Wanted = Wanted()) -> tuple[str, str] | None:
    """``(kind, stream key)`` of a file; None for a file a directory holds that the view
    does not read."""
    name = path.name
    parent = str(path.parent)
    m = _NODE_LOG_NAME.fullmatch(name)
    if m is not None and (explicit or wanted.node_logs):
        return NODE_LOG, os.path.join(parent, m["base"])
    o = wanted.otlp_name.fullmatch(name)
    if o is not None:
        return OTLP_JSON, os.path.join(parent, o["stem"] + ".jsonl")
    if not explicit:
        return None
    a = _ANY_OTLP.fullmatch(name)
    if a is not None:
        return OTLP_JSON, os.path.join(parent, a["stem"] + ".jsonl")
    return NODE_LOG, str(path)


def _expand(arg: str, wanted: Wanted) -> list[tuple[Path, bool]]:
    """The files one argument names: (path, named explicitly)."""
    path = Path(arg)
    if not os.path.lexists(arg) and _GLOB_CHARS.search(arg):
        matches = sorted(glob.glob(arg))
        if not matches:
            raise PathError(f"{arg}: no file matches")
        out: list[tuple[Path, bool]] = []
        for m in matches:
            out.extend(_expand(m, wanted))
        return out
    if path.is_dir():
        found = _directory(path, wanted)
        for sub in wanted.subdirs:
            if found or not (path / sub).is_dir():
                continue
            found = _directory(path / sub, wanted)
        if not found:
            raise PathError(f"{arg}: {wanted.describe()}")
        return found
    if not os.path.lexists(arg):
        raise PathError(f"{arg}: no such file or directory")
    return [(path, True)]


def _directory(path: Path, wanted: Wanted) -> list[tuple[Path, bool]]:
    """The files of one directory (not its subdirectories) the view reads."""
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise PathError(f"{path}: {exc.strerror or exc}") from None
    found = [(path / n, False) for n in names if (path / n).is_file()]
    return [(p, e) for p, e in found if classify(p, explicit=False, wanted=wanted)]


def _check_readable(path: Path) -> None:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise PathError(f"{path}: {exc.strerror or exc}") from None


def find_streams(args: list[str], wanted: Wanted = Wanted()) -> list[Stream]:
    """The streams the arguments name, each file once; raises :class:`PathError` naming
    the first path that is missing or unreadable."""
    streams: dict[str, Stream] = {}
    seen: set[str] = set()
    for arg in args:
        for path, explicit in _expand(arg, wanted):
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            _check_readable(path)
            kind, key = classify(path, explicit=explicit, wanted=wanted) or (NODE_LOG, str(path))
            stream = streams.setdefault(key, Stream(kind, key))
            stream.files.append(path)
    for stream in streams.values():
        stream.files.sort(key=partial(_order, stream.kind))
    return list(streams.values())


class Tail:
    """Numbered lines of one file, read in chunks; reading again later continues where it
    stopped (for ``--follow``). A last line without its newline is held back until it is
    complete, unless ``final``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = open(path, "rb")  # noqa: SIM115  (kept open while following)
        self.ino = os.fstat(self.fh.fileno()).st_ino
        self.number = 0
        self.partial = b""

    def lines(self, *, final: bool) -> Iterator[tuple[int, str]]:
        """The complete lines written since the last call."""
        read = self.fh.read
        while True:
            chunk = read(_CHUNK)
            if not chunk:
                break
            if self.partial:
                chunk = self.partial + chunk
                self.partial = b""
            parts = chunk.split(b"\n")
            self.partial = parts.pop()
            number = self.number
            for raw in parts:
                number += 1
                yield number, raw.decode("utf-8", "replace")
            self.number = number
        if final and self.partial:
            self.number += 1
            raw, self.partial = self.partial, b""
            yield self.number, raw.decode("utf-8", "replace")

    def replaced(self) -> bool:
        """Whether the path now names another file (rotated) or this one shrank
        (truncated)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_ino != self.ino or st.st_size < self.fh.tell() - len(self.partial)

    def close(self) -> None:
        self.fh.close()
