"""``faulthandler``'s dumps of every thread's Python stack, as one record each.

A fatal signal's dump starts with ``Fatal Python error: <what>`` (the signal, in words);
a registered signal's dump (SIGTERM, the stacks signal) is only the threads. Either way
each thread is ``Thread 0x… (most recent call first):`` (``Current thread`` for the one
that took the signal) followed by ``  File "…", line N in name`` lines. The record's call
site is the innermost frame of the thread that took the signal; the dump itself is the
record's exception text (``exception.stacktrace``), so the node log and every sink show it.
"""

from __future__ import annotations

import re
from typing import Any, Final

from nvrx_otel import record as rec

LOGGER: Final = "nvrx_otel.watch"
"""The logger name of every record a watcher makes (dumps, endings)."""

FATAL_WORDS: Final = {
    "Segmentation fault": "SIGSEGV",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
}
"""faulthandler's words for each fatal signal it handles."""

_FRAME: Final = re.compile(r'^  File "(?P<path>.*)", line (?P<line>\d{1,9}) in (?P<fn>.*)$')
_THREAD: Final = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
_HEADER: Final = "Fatal Python error: "


def signal_of(text: str) -> tuple[str | None, str]:
    """The signal a fatal dump names, and its words (``("SIGSEGV", "Segmentation fault")``);
    ``(None, "")`` for a dump without the fatal header."""
    first = text.lstrip("\n").split("\n", 1)[0]
    if not first.startswith(_HEADER):
        return None, ""
    words = first[len(_HEADER) :].strip()
    return FATAL_WORDS.get(words), words


def _site(text: str) -> dict[str, Any]:
    lines = text.split("\n")
    current = next((i for i, ln in enumerate(lines) if ln.startswith("Current thread")), None)
    start = 0 if current is None else current
    for ln in lines[start + 1 :]:
        m = _FRAME.match(ln)
        if m:
            path = m["path"]
            return {"path": path, "file": path.rsplit("/", 1)[-1], "line": int(m["line"]),
                    "fn": m["fn"]}  # fmt: skip
        if _THREAD.match(ln):
            break
    return {}


_OWN: Final = re.compile(r'nvrx_otel/watch/capture\.py", line \d+ in _lifeline$', re.M)


def without_own_threads(text: str) -> str:
    """``text`` without the stack of the package's own waiting thread (``capture.py``)."""
    blocks = text.split("\n\n")
    return "\n\n".join(b for b in blocks if not (_THREAD.match(b) and _OWN.search(b)))


def dump_record(text: str, ts: int, *, signal: str | None, reason: str) -> dict[str, Any]:
    """One record for a dump. ``reason``: ``fatal`` (the process dies of ``signal``),
    ``terminate`` (SIGTERM received) or ``requested`` (the stacks signal; it carries on)."""
    text = without_own_threads(text.strip("\n"))
    threads = sum(1 for ln in text.split("\n") if _THREAD.match(ln))
    named, words = signal_of(text)
    signal = signal or named or "signal"
    what = f"{threads} thread{'s' if threads != 1 else ''}"
    if reason == "fatal":
        sev, lvl = 21, "FATAL"
        msg = f"fatal signal {signal} ({words or 'crash'}): Python stacks of {what}"
    elif reason == "terminate":
        sev, lvl = 13, "WARNING"
        msg = f"{signal} received: Python stacks of {what}"
    else:
        sev, lvl = 9, "INFO"
        msg = f"{signal} received: Python stacks of {what} (the process carries on)"
    out: dict[str, Any] = {
        "k": rec.KIND_LOG,
        "ts": ts,
        "sev": sev,
        "lvl": lvl,
        "lg": LOGGER,
        "msg": msg,
        "exc": text,
        "exc_type": signal,
        "exc_msg": words or msg,
        "attrs": {"nv.nvrx.process.signal": signal, "nv.nvrx.process.stacks": reason},
    }
    out.update(_site(text))
    return out


class StderrDumps:
    """Finds a fatal dump in captured stderr lines (a ``faulthandler`` the program enabled
    itself, or a forked child's): its lines are held and become one record."""

    _BODY: Final = (
        "Thread ",
        "Current thread ",
        "  ",
        "Stack (most recent",
        "Extension modules",
        "Python runtime state",
        "<no Python frame>",
    )

    def __init__(self) -> None:
        self.lines: list[str] | None = None
        self.started = 0

    def take(self, line: str, ts: int) -> tuple[bool, dict[str, Any] | None]:
        """(whether ``line`` belongs to a dump, a finished dump's record if one ended)."""
        if self.lines is None:
            if line.startswith(_HEADER):
                self.lines, self.started = [line], ts
                return True, None
            return False, None
        if not line or line.startswith(self._BODY):
            self.lines.append(line)
            return True, None
        done = self.finish()
        return self.take(line, ts)[0], done

    def finish(self) -> dict[str, Any] | None:
        """The record of a dump in progress (at a line that is not part of it, or the end)."""
        if self.lines is None:
            return None
        text, self.lines = "\n".join(self.lines), None
        named, _ = signal_of(text)
        return dump_record(text, self.started, signal=named, reason="fatal")
