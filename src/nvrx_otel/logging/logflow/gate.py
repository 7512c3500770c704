"""The module-level gate: a call no handler takes returns before loguru builds a record.

loguru decides that a call is disabled by one number, the lowest level of any handler.
With ``module_levels`` that number says too little: a rule that lowers a level
(``noisy.lib: {file: DEBUG}`` under a global INFO) lowers it for every module, and a rule
that raises one (``chatty: {file: WARNING}``) cannot lower the work done for that module's
INFO calls. Either way each such call builds a whole record (frame, time, thread, process,
message: several µs) just for the handlers' filters to reject it; LogFlow measured 9.5 µs.

While the front end is configured, loguru's global ``logger`` (and every logger bound from
it: ``get_logger``, ``bind``, ``opt``, ``patch``) has the class :class:`GatedLogger`, whose
calls never raise a bad format into training (``safecall.py``). While ``module_levels``
has rules the gate is active: its level methods first compare the level with loguru's
own lowest handler level (as loguru does), then with the calling module's threshold: the
lowest level any handler takes from that module (our handlers by their ``module_levels``
thresholds, other handlers by their level). The threshold is computed once per module
and process; a handler added or removed (loguru replaces its handler table) starts the
cache afresh. A logger with a patcher (``logger.patch``, ``logger.configure(patcher=...)``)
may rename its records, and the handlers judge a record by the name it finally has (as
LogFlow's filters do), so its calls pass the gate on loguru's lowest level alone. The gate
only ever skips what every handler would reject, so the handlers' own filters stay the
authority.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Final

import loguru
import loguru._logger

from nvrx_otel.logging.logflow.safecall import kept

# loguru's implementation class is untyped: work with it as Any.
_LoguruLogger: Any = loguru._logger.Logger
_root: Any = loguru.logger

NEVER: Final = 1 << 30
"""A threshold no level reaches (a handler that takes nothing in this process)."""

_getframe = sys._getframe

Threshold = Callable[[Any], int]
"""Lowest level a handler takes from a module name in this process."""


class _Gate:
    """Thresholds of our handlers and the cache of per-module minima."""

    def __init__(self) -> None:
        self.active = False
        self.core: Any = _root._core
        self.seen: object = None
        self.ours: dict[int, tuple[Threshold, int]] = {}  # handler id -> (threshold, ceiling)
        self.cache: dict[Any, int] = {}
        self.floor = 0
        self.accept_all = 0
        self.foreign = NEVER

    def refresh(self) -> None:
        """Re-read loguru's handler table (it is replaced on every add and remove)."""
        handlers = self.core.handlers
        foreign = NEVER
        accept_all = NEVER
        for hid, handler in handlers.items():
            mine = self.ours.get(hid)
            if mine is None:
                foreign = min(foreign, int(handler.levelno))
                accept_all = min(accept_all, int(handler.levelno))
            else:
                accept_all = min(accept_all, mine[1])
        self.foreign = foreign
        self.accept_all = accept_all
        self.floor = int(self.core.min_level) if handlers else NEVER
        self.cache = {}
        self.seen = handlers

    def threshold(self, name: Any) -> int:
        lowest = self.foreign
        handlers = self.core.handlers
        for hid, (threshold, _) in self.ours.items():
            if hid in handlers:
                lowest = min(lowest, threshold(name))
        self.cache[name] = lowest
        return lowest


_gate = _Gate()


def _open(level_no: int, options: tuple[Any, ...]) -> bool:
    """Whether any handler may take a call at ``level_no`` from the caller's module.

    ``options`` are the logger's (loguru's ``_options``: depth second, patchers eighth). A
    patcher may rename the record (``record["name"] = ...``) after this check, and the
    handlers filter by the name the record finally has, as LogFlow's do: so a patched
    call is only held to loguru's lowest handler level, never to the caller's module."""
    gate = _gate
    if gate.seen is not gate.core.handlers:
        gate.refresh()
    if level_no < gate.floor:
        return False
    if level_no >= gate.accept_all or options[7] or gate.core.patcher is not None:
        return True
    try:
        name = _getframe(options[1] + 2).f_globals["__name__"]
    except (ValueError, KeyError):
        return True  # loguru copes with an odd frame; let it decide
    threshold = gate.cache.get(name)
    if threshold is None:
        threshold = gate.threshold(name)
    return level_no >= threshold


class GatedLogger(_LoguruLogger):  # type: ignore[misc]  # loguru's class is untyped
    """loguru's Logger whose level methods consult the gate first (while it is active) and
    never raise a bad format call into training (:func:`~.safecall.kept`).

    A level method first compares its level with loguru's lowest handler level, as
    loguru's ``_log`` does first (the levels of loguru's own names are fixed): a call no
    handler takes then costs less than plain loguru's, which makes that call."""

    def trace(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 5:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(5, self._options):
            try:
                self._log("TRACE", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "TRACE", self._options, message, args, kwargs, exc):
                    raise

    def debug(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 10:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(10, self._options):
            try:
                self._log("DEBUG", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "DEBUG", self._options, message, args, kwargs, exc):
                    raise

    def info(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 20:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(20, self._options):
            try:
                self._log("INFO", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "INFO", self._options, message, args, kwargs, exc):
                    raise

    def success(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 25:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(25, self._options):
            try:
                self._log("SUCCESS", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "SUCCESS", self._options, message, args, kwargs, exc):
                    raise

    def warning(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 30:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(30, self._options):
            try:
                self._log("WARNING", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "WARNING", self._options, message, args, kwargs, exc):
                    raise

    def error(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 40:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(40, self._options):
            try:
                self._log("ERROR", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "ERROR", self._options, message, args, kwargs, exc):
                    raise

    def critical(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 50:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(50, self._options):
            try:
                self._log("CRITICAL", False, self._options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "CRITICAL", self._options, message, args, kwargs, exc):
                    raise

    def exception(self, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if self._core.min_level > 40:  # what loguru checks first, without its call
            return
        if not _gate.active or _open(40, self._options):
            options = (True, *self._options[1:])
            try:
                self._log("ERROR", False, options, message, args, kwargs)
            except Exception as exc:
                if not kept(self, "ERROR", options, message, args, kwargs, exc):
                    raise

    def log(self, level: Any, message: Any, /, *args: Any, **kwargs: Any) -> None:
        if _gate.active:
            found = self._core.levels_lookup.get(level) if isinstance(level, (str, int)) else None
            if found is not None and not _open(found[2], self._options):
                return
        try:
            self._log(level, False, self._options, message, args, kwargs)
        except Exception as exc:
            if not kept(self, level, self._options, message, args, kwargs, exc):
                raise

    def opt(self, *args: Any, **kwargs: Any) -> Any:
        return _gated(super().opt(*args, **kwargs))

    def bind(self, /, **kwargs: Any) -> Any:
        return _gated(super().bind(**kwargs))

    def patch(self, patcher: Any) -> Any:
        return _gated(super().patch(patcher))


def _gated(new: Any) -> Any:
    new.__class__ = GatedLogger
    return new


def register(handler_id: int, threshold: Threshold, ceiling: int) -> None:
    """Tell the gate how one of our handlers filters by module (its threshold function and
    the highest threshold it can return)."""
    _gate.ours[handler_id] = (threshold, ceiling)
    _gate.seen = None


def adopt() -> None:
    """Give loguru's global logger (and every logger bound from it from now on) our class:
    its calls never raise a bad format into training, gate or no gate."""
    if type(_root) is _LoguruLogger:
        _root.__class__ = GatedLogger


def release() -> None:
    """Give loguru's global logger its own class back (loggers bound meanwhile keep ours)."""
    if type(_root) is GatedLogger:
        _root.__class__ = _LoguruLogger


def install() -> None:
    """Turn the gate on (and give loguru's global logger our class)."""
    _gate.active = True
    _gate.seen = None
    adopt()


def uninstall() -> None:
    """Turn the gate off (gated loggers pass straight to loguru) and forget ours."""
    _gate.active = False
    _gate.ours.clear()
    _gate.seen = None


def is_active() -> bool:
    return _gate.active


def _after_fork_in_child() -> None:
    _gate.seen = None  # workers_only rules and the console's pid check change the answers


os.register_at_fork(after_in_child=_after_fork_in_child)
