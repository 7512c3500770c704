"""Groups of records → text: plain (the node log's own grammar, so the output reads like
one node log and ``grep`` and ``lnav`` work on it), Rich (colours, on a terminal) or JSON
(one object per line).

Plain and Rich text escape control characters as the node log does (``\\xNN``), whatever
the OTLP file held: no ANSI code from a message reaches the terminal or a pipe raw.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import IO, Any, Final

import orjson

from nvrx_otel.levels import BY_NAME
from nvrx_otel.nodeline import escape, local_time
from nvrx_otel.view.dedup import Group
from nvrx_otel.view.entry import Entry

INDENT: Final = "    "


def _r(value: int | None) -> str:
    return "?" if value is None else str(value)


def head(e: Entry) -> str:
    """The record's line without its repeat note (the node-log grammar)."""
    first, _, _ = e.text.partition("\n")
    line = (
        f"{local_time(e.ts_ns)} [{e.level}] [{e.node or '?'}] "
        f"[workload:{_r(e.rank)}({_r(e.lrank)}) infra:{_r(e.irank)}({_r(e.ilrank)})] "
        f"{e.file}:{_r(e.line)} {first}"
    )
    if e.trace_id is not None:
        line = f"{line} [trace_id={e.trace_id} span_id={e.span_id or '?'}]"
    return escape(line)


def continuation(e: Entry) -> list[str]:
    """The further lines of the message, unindented and escaped."""
    _, newline, rest = e.text.partition("\n")
    return [escape(part) for part in rest.split("\n")] if newline else []


def plain(group: Group) -> str:
    """The group's text with its final newline."""
    e = group.entry
    line = head(e)
    note = group.summary()
    if note:
        line = f"{line} [{note}]"
    if "\n" not in e.text:
        return line + "\n"
    return "\n".join([line, *(INDENT + part for part in continuation(e)), ""])


def _iso(ts_ns: int) -> str:
    try:
        when = datetime.fromtimestamp(ts_ns // 1000 / 1e6).astimezone()
    except (OverflowError, OSError, ValueError):
        return ""
    return when.isoformat(timespec="microseconds")


def as_dict(group: Group) -> dict[str, Any]:
    """The group as a JSON object (``repeated`` only when records collapsed into it)."""
    e = group.entry
    doc: dict[str, Any] = {
        "time": _iso(e.ts_ns),
        "ts_ns": e.ts_ns,
        "level": e.level,
        "severity": e.severity,
        "node": e.node,
        "rank": e.rank,
        "local_rank": e.lrank,
        "infra_rank": e.irank,
        "infra_local_rank": e.ilrank,
        "file": e.file,
        "line": e.line,
        "message": e.text,
        "trace_id": e.trace_id,
        "span_id": e.span_id,
        "origin": e.origin,
    }
    if e.loss is not None:
        doc["loss"] = {"what": e.loss.what, "count": e.loss.count, "reason": e.loss.reason}
    if group.count > 1:
        doc["repeated"] = {
            "count": group.count,
            "ranks": sorted(group.ranks),
            "infra_ranks": sorted(group.infra),
            "unknown_ranks": group.unknown,
            "nodes": sorted(str(n) for n in group.nodes),
        }
    return doc


def json_line(group: Group) -> str:
    return orjson.dumps(as_dict(group), option=orjson.OPT_APPEND_NEWLINE).decode()


class RichWriter:
    """Coloured lines on a terminal (Rich, imported only here)."""

    def __init__(self, out: IO[str]) -> None:
        from rich.console import Console

        self.console = Console(file=out, highlight=False, markup=False, emoji=False)

    def __call__(self, group: Group) -> None:
        from rich.text import Text

        e = group.entry
        lv = BY_NAME.get(e.level.upper())
        text = Text()
        text.append(local_time(e.ts_ns), style="dim")
        text.append(" ")
        text.append(f"[{e.level}]", style=lv.style if lv is not None else "")
        text.append(f" [{escape(e.node or '?')}] ", style="cyan")
        text.append(
            f"[workload:{_r(e.rank)}({_r(e.lrank)}) infra:{_r(e.irank)}({_r(e.ilrank)})]",
            style="cyan",
        )
        text.append(f" {escape(e.file)}:{_r(e.line)} ", style="dim")
        first = escape(e.text.partition("\n")[0])
        text.append(first, style="bold yellow" if e.loss is not None else "")
        if e.trace_id is not None:
            text.append(f" [trace_id={e.trace_id} span_id={e.span_id or '?'}]", style="dim")
        note = group.summary()
        if note:
            text.append(f" [{note}]", style="magenta")
        for part in continuation(e):
            text.append("\n" + INDENT + part)
        self.console.print(text, soft_wrap=True)

    def flush(self) -> None:
        self.console.file.flush()


class PlainWriter:
    """Plain or JSON lines, written in blocks."""

    def __init__(self, out: IO[str], fmt: Callable[[Group], str]) -> None:
        self.out = out
        self.fmt = fmt
        self.buf: list[str] = []
        self.size = 0

    def __call__(self, group: Group) -> None:
        text = self.fmt(group)
        self.buf.append(text)
        self.size += len(text)
        if self.size >= 1 << 16:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.out.write("".join(self.buf))
            self.buf = []
            self.size = 0
        self.out.flush()
