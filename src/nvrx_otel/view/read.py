"""A stream's entries: its files one after the other through the reader of their kind,
then (``--follow``) what is appended to the live file, across its rotations."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Final, TextIO

from nvrx_otel.view.entry import Entry
from nvrx_otel.view.files import NODE_LOG, Stream, Tail, find_streams
from nvrx_otel.view.otlpjson import read_otlp_json
from nvrx_otel.view.sources import NodeLogParser, read_node_log

NAMED_PER_FILE: Final = 5
"""Malformed lines named on stderr per file; the rest are counted in one line at the end."""


class Problems:
    """Lines that are not records: each named once on stderr as ``file:line`` (the first
    :data:`NAMED_PER_FILE` of a file), the rest counted by :meth:`summary`. ``prog``
    starts each line; ``what`` says what such a line is not."""

    def __init__(
        self, out: TextIO | None = None, *, prog: str = "nvrx-otel logs", what: str = "log record"
    ) -> None:
        self.out = out
        self.prog = prog
        self.what = what
        self.counts: dict[str, int] = {}

    def __call__(self, path: str, number: int, line: str) -> None:
        n = self.counts.get(path, 0) + 1
        self.counts[path] = n
        if n <= NAMED_PER_FILE:
            shown = line if len(line) <= 80 else line[:77] + "..."
            self._say(f"{path}:{number}: skipped, not a {self.what}: {shown!r}")

    @property
    def total(self) -> int:
        """Lines skipped so far."""
        return sum(self.counts.values())

    def summary(self) -> None:
        for path, n in self.counts.items():
            if n > NAMED_PER_FILE:
                self._say(f"{path}: {n - NAMED_PER_FILE} more lines skipped, not {self.what}s")

    def _say(self, text: str) -> None:
        try:
            print(f"{self.prog}: {text}", file=self.out or sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def read_all(paths: list[str], problems: Problems | None = None) -> Iterator[Entry]:
    """Every record the paths hold (files, directories, globs), in one time order: what
    ``nvrx-otel logs`` shows before it filters and collapses. Raises
    :class:`~nvrx_otel.view.files.PathError` for a path it cannot read."""
    from nvrx_otel.view.merge import merge

    readers = [StreamReader(s, problems or Problems()) for s in find_streams(paths)]
    return merge([r.entries() for r in readers])


class StreamReader:
    """Reads one :class:`~nvrx_otel.view.files.Stream`."""

    def __init__(self, stream: Stream, problems: Problems) -> None:
        self.stream = stream
        self.problems = problems
        self.tail: Tail | None = None
        self.parser: NodeLogParser | None = None

    def entries(self, *, follow: bool = False) -> Iterator[Entry]:
        """Every entry of the stream's files as they are now, oldest file first. With
        ``follow`` the live file stays open for :meth:`poll`."""
        files = self.stream.files
        for i, path in enumerate(files):
            tail = Tail(path)
            live = follow and i == len(files) - 1
            try:
                yield from self._read(tail, final=not live)
            finally:
                if live:
                    self.tail = tail
                else:
                    tail.close()

    def _read(self, tail: Tail, *, final: bool) -> Iterator[Entry]:
        path = str(tail.path)
        lines = tail.lines(final=final)
        if self.stream.kind != NODE_LOG:
            yield from read_otlp_json(lines, path, self.problems)
            return
        if final:
            yield from read_node_log(lines, path, self.problems)
            return
        self.parser = parser = NodeLogParser(path, self.problems)
        for number, line in lines:
            entry = parser.feed(line, number)
            if entry is not None:
                yield entry

    def poll(self) -> list[Entry]:
        """What the live file got since the last look (``--follow``). A node-log record
        is held until the next record line, or until a look finds nothing new (its
        continuation lines come in the same write)."""
        tail = self.tail
        if tail is None:
            return []
        out = list(self._more(tail))
        if tail.replaced():
            out.extend(self._more(tail))  # the rest of the old file, then the new one
            out.extend(self._flush())
            tail.close()
            try:
                self.tail = tail = Tail(tail.path)
            except OSError:
                self.tail = None
                return out
            out.extend(self._read(tail, final=False))
        if not out:
            out.extend(self._flush())
        return out

    def _more(self, tail: Tail) -> Iterator[Entry]:
        if self.stream.kind != NODE_LOG:
            yield from read_otlp_json(tail.lines(final=False), str(tail.path), self.problems)
            return
        parser = self.parser
        if parser is None:
            self.parser = parser = NodeLogParser(str(tail.path), self.problems)
        for number, line in tail.lines(final=False):
            entry = parser.feed(line, number)
            if entry is not None:
                yield entry

    def _flush(self) -> list[Entry]:
        if self.parser is None:
            return []
        entry = self.parser.flush()
        return [] if entry is None else [entry]

    def close(self) -> None:
        if self.tail is not None:
            self.tail.close()
            self.tail = None
