"""Levels: loguru level names, and LogFlow's ``module_levels`` as per-sink thresholds.

A rule maps a dotted module prefix to a level for the console sink, the file sink, or
both. Matching is LogFlow's: by dotted segments (``pkg.sub`` matches ``pkg.sub`` and
``pkg.sub.mod``, never ``pkg.subway``), the longest matching prefix wins, a sink the rule
does not name falls back to that sink's global level, and a ``workers_only`` rule exists
only in processes other than the main process. The threshold of a module is worked out
once per process and cached, so a filter costs one dict lookup.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nvrx_otel import levels as named_levels
from nvrx_otel.logging.logflow import ranks

CONSOLE: Final = 0
FILE: Final = 1
SINK_NAMES: Final = ("console", "file")
_RULE_KEYS: Final = frozenset({"console", "file", "workers_only"})


class Invalid(ValueError):
    """A setting value that does not fit; the resolver adds where it came from."""

    def __init__(self, expected: str, *, key: str | None = None, value: Any = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.key = key
        self.value = value


Level = str | int
"""A level as configured: a loguru level name (upper case) or a number."""


def check_level(value: Any) -> Level:
    """A level name known to loguru (any case) or a number >= 0; raises :class:`Invalid`."""
    from loguru import logger

    expected = f"a loguru level ({named_levels.names_text()}) or a number"
    if isinstance(value, bool):
        raise Invalid(expected)
    if isinstance(value, int):
        if value < 0:
            raise Invalid(expected)
        return value
    if not isinstance(value, str) or not value.strip():
        raise Invalid(expected)
    text = value.strip()
    if text.isdigit():
        return int(text)
    name = text.upper()
    try:
        logger.level(name)
    except ValueError:
        raise Invalid(expected) from None
    return name


def level_number(level: Level) -> int:
    """The severity number of a checked level."""
    if isinstance(level, int):
        return level
    from loguru import logger

    return int(logger.level(level).no)


@dataclass(frozen=True)
class Rule:
    """One ``module_levels`` entry."""

    prefix: str
    console: Level | None = None
    file: Level | None = None
    workers_only: bool = False

    def level(self, sink: int) -> Level | None:
        return self.console if sink == CONSOLE else self.file

    def as_config(self) -> dict[str, Any]:
        """The entry as it is written in a configuration file."""
        out: dict[str, Any] = {}
        if self.console is not None:
            out["console"] = self.console
        if self.file is not None:
            out["file"] = self.file
        if self.workers_only:
            out["workers_only"] = True
        return out


def check_module_levels(value: Any) -> tuple[Rule, ...]:
    """Parse ``module_levels`` (a mapping of prefix to sub-mapping); raises :class:`Invalid`
    naming the entry or sub-key at fault."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise Invalid("a mapping of module prefix to {console, file, workers_only}")
    rules = []
    for prefix, entry in value.items():
        key = f"module_levels[{prefix!r}]"
        if not isinstance(prefix, str) or not prefix.strip() or prefix != prefix.strip():
            raise Invalid("a dotted module name as key", key=key, value=prefix)
        if any(not part for part in prefix.split(".")):
            raise Invalid("a dotted module name as key (no empty segment)", key=key, value=prefix)
        if not isinstance(entry, Mapping):
            raise Invalid("a mapping with console, file and/or workers_only", key=key, value=entry)
        unknown = sorted(str(k) for k in entry if k not in _RULE_KEYS)
        if unknown:
            raise Invalid(
                "only console, file and workers_only as sub-keys",
                key=f"{key}.{unknown[0]}",
                value=entry[unknown[0]],
            )
        if entry.get("console") is None and entry.get("file") is None:
            raise Invalid("at least one of console or file", key=key, value=dict(entry))
        levels: dict[str, Level | None] = {}
        for sink in SINK_NAMES:
            raw = entry.get(sink)
            if raw is None:
                levels[sink] = None
                continue
            try:
                levels[sink] = check_level(raw)
            except Invalid as exc:
                raise Invalid(exc.expected, key=f"{key}.{sink}", value=raw) from None
        workers_only = entry.get("workers_only", False)
        if not isinstance(workers_only, bool):
            raise Invalid("true or false", key=f"{key}.workers_only", value=workers_only)
        rules.append(Rule(prefix, levels["console"], levels["file"], workers_only))
    return tuple(sorted(rules, key=lambda r: r.prefix))


class ModuleLevels:
    """Per-sink thresholds of every module name: the global levels plus the rules.

    ``threshold(name, sink)`` is the lowest level the sink takes from module ``name`` in
    this process; it is computed once per name and cached. A forked child starts with
    empty caches (``workers_only`` rules apply there).
    """

    def __init__(self, console: Level, file: Level, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.globals = (level_number(console), level_number(file))
        self._numbers = {
            (r.prefix, sink): level_number(lv)
            for r in rules
            for sink in (CONSOLE, FILE)
            if (lv := r.level(sink)) is not None
        }
        self.caches: tuple[dict[str | None, int], dict[str | None, int]] = ({}, {})
        self._active: dict[str, Rule] | None = None
        _tables.add(self)

    def lowers(self) -> bool:
        """Whether a rule sets a sink below that sink's global level."""
        return any(n < self.globals[sink] for (_, sink), n in self._numbers.items())

    def floor(self, sink: int) -> int:
        """The lowest threshold any module can have on ``sink`` (the loguru handler level)."""
        levels = [n for (_, s), n in self._numbers.items() if s == sink]
        return min([self.globals[sink], *levels])

    def ceiling(self, sink: int) -> int:
        """The highest threshold any module can have on ``sink``."""
        levels = [n for (_, s), n in self._numbers.items() if s == sink]
        return max([self.globals[sink], *levels])

    def threshold(self, name: str | None, sink: int) -> int:
        """The lowest level ``sink`` takes from module ``name`` in this process."""
        cache = self.caches[sink]
        found = cache.get(name)
        if found is None:
            found = cache[name] = self._compute(name, sink)
        return found

    def _compute(self, name: str | None, sink: int) -> int:
        active = self._active
        if active is None:
            worker = not ranks.is_main_process()
            active = self._active = {
                r.prefix: r for r in self.rules if worker or not r.workers_only
            }
        rule = None
        if name and active:
            probe = name
            while True:
                rule = active.get(probe)
                if rule is not None:
                    break
                cut = probe.rfind(".")
                if cut < 0:
                    break
                probe = probe[:cut]
        if rule is None or rule.level(sink) is None:
            return self.globals[sink]
        return self._numbers[(rule.prefix, sink)]

    def forget(self) -> None:
        """Drop the caches (after a fork: the process may now be a worker)."""
        self._active = None
        for cache in self.caches:
            cache.clear()


class LevelFilter:
    """A loguru filter: the record's level reaches its module's threshold on one sink."""

    __slots__ = ("cache", "levels", "sink")

    def __init__(self, levels: ModuleLevels, sink: int) -> None:
        self.levels = levels
        self.sink = sink
        self.cache = levels.caches[sink]

    def __call__(self, record: Any) -> bool:
        name = record["name"]
        threshold = self.cache.get(name)
        if threshold is None:
            threshold = self.levels.threshold(name, self.sink)
        return bool(record["level"].no >= threshold)


_tables: weakref.WeakSet[ModuleLevels] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for table in list(_tables):
        table.forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
