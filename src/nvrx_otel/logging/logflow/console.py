"""The console: rank 0's main process only, rendered with Rich to stderr.

Lines read like LogFlow's console format,
``{time:YYYY-MM-DD HH:mm:ss} | {level: <8} | {rank_tag}{name}:{function}:{line} | {message}``,
followed by the traceback when there is one. Colour only when stderr is a terminal and
``NO_COLOR`` is not set; messages are never read as Rich markup. Rich is imported when the
first console sink is made.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

from nvrx_otel import env, levels
from nvrx_otel.logging.logflow.levels import CONSOLE, ModuleLevels

_STYLES: Final = {lv.name: lv.style for lv in levels.LEVELS}


def wants_colour() -> bool:
    """Colour on a terminal, never with ``NO_COLOR``."""
    if os.environ.get(env.NO_COLOR, ""):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class RichConsoleSink:
    """A loguru sink printing records through a Rich console on ``sys.stderr``."""

    def __init__(self, rank_tag: str = "", *, colour: bool | None = None) -> None:
        from rich.console import Console

        self.colour = wants_colour() if colour is None else colour
        self.rank_tag = rank_tag
        self.console = Console(
            stderr=True,  # follows sys.stderr when it is replaced
            color_system="auto" if self.colour else None,
            no_color=not self.colour,
            highlight=False,
            markup=False,
            emoji=False,
            soft_wrap=True,
        )

    def __call__(self, message: Any) -> None:
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
        self.console.print(text)


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
