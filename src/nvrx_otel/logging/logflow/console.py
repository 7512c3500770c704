"""The console: rank 0's main process only, rendered with Rich to stderr.

Lines read like LogFlow's console format,
``{time:YYYY-MM-DD HH:mm:ss} | {level: <8} | {rank_tag}{name}:{function}:{line} | {message}``,
followed by the traceback when there is one. Colour only when stderr is a terminal and
``NO_COLOR`` is not set; messages are never read as Rich markup. Rich is imported when the
first console sink is made. A printed record that the spool takes too is announced to the
watcher, so that its captured copy on stderr is not recorded a second time.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

from nvrx_otel import env, levels
from nvrx_otel.logging.handler import report_error
from nvrx_otel.logging.logflow.levels import CONSOLE, FILE, ModuleLevels
from nvrx_otel.watch import capture

_STYLES: Final = {lv.name: lv.style for lv in levels.LEVELS}


def wants_colour() -> bool:
    """Colour on a terminal, never with ``NO_COLOR``."""
    if os.environ.get(env.NO_COLOR, ""):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _console_class() -> Any:
    """Rich's ``Console``, except on a broken pipe (the reader of stderr gone: ``| head``, a
    launcher's log reader ended): Rich then points the process's *stdout* at /dev/null and
    raises ``SystemExit`` into the log call; this one only goes quiet."""
    from rich.console import Console

    class QuietOnBrokenPipe(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True

    return QuietOnBrokenPipe


class RichConsoleSink:
    """A loguru sink printing records through a Rich console on ``sys.stderr``.

    A console that cannot be written (a broken pipe, a closed or failing stderr) is given
    up: the sink stops printing and says so once; the record still goes to the spool and
    the run file, and the log call returns normally."""

    def __init__(
        self,
        rank_tag: str = "",
        *,
        colour: bool | None = None,
        spooled: tuple[ModuleLevels | None, int] | None = None,
    ) -> None:
        """``spooled``: what the spool takes (module levels, else the file floor), when
        there is a spool: a printed line of a spooled record is announced to the watcher,
        which then does not record the captured copy a second time."""
        self.colour = wants_colour() if colour is None else colour
        self.rank_tag = rank_tag
        self.spooled = spooled
        self.console = _console_class()(
            stderr=True,  # follows sys.stderr when it is replaced
            color_system="auto" if self.colour else None,
            no_color=not self.colour,
            highlight=False,
            markup=False,
            emoji=False,
            soft_wrap=True,
        )

    def __call__(self, message: Any) -> None:
        if self.console.quiet:
            return  # given up: see the class docstring
        from rich.text import Text

        record = message.record
        level = record["level"]
        style = _STYLES.get(level.name, "bold") if self.colour else ""
        body = str(message).rstrip("\n")  # the message and, after it, any traceback
        text = Text()
        text.append(record["time"].strftime("%Y-%m-%d %H:%M:%S"), "green" if self.colour else "")
        text.append(" | ")
        text.append(f"{level.name: <8}", style)
        text.append(f" | {self.rank_tag}")
        where = f"{record['name']}:{record['function']}:{record['line']}"
        text.append(where, "cyan" if self.colour else "")
        text.append(" | ")
        text.append(body, style)
        try:
            if self.spooled is not None and capture.captured(2):
                self._announce(record, text)
            self.console.print(text)
        except (OSError, ValueError) as exc:  # stderr failing or closed
            self.console.quiet = True
            report_error("the console cannot be written, it is left", exc)

    def _announce(self, record: Any, text: Any) -> None:
        levels, floor = self.spooled or (None, 0)
        if record["level"].no < (levels.threshold(record["name"], FILE) if levels else floor):
            return
        if "\t" in text.plain:
            text = text.copy()
            text.expand_tabs(8)  # as Rich prints it
        capture.expect(2, text.plain + "\n")


class ConsoleFilter:
    """Only the process that configured the console prints (a forked child never does);
    with ``module_levels``, the module's console threshold applies."""

    __slots__ = ("cache", "levels", "pid")

    def __init__(self, pid: int, levels: ModuleLevels | None) -> None:
        self.pid = pid
        self.levels = levels
        self.cache = levels.caches[CONSOLE] if levels is not None else None

    def __call__(self, record: Any) -> bool:
        if os.getpid() != self.pid:
            return False
        cache = self.cache
        if cache is None:
            return True
        name = record["name"]
        threshold = cache.get(name)
        if threshold is None:
            threshold = self.levels.threshold(name, CONSOLE)  # type: ignore[union-attr]
        return bool(record["level"].no >= threshold)
