"""How a settings row is declared and read: the ``Setting`` type, its parsers, ``read``.

The rows themselves are the settings table (``env.py``, with the variables other tools
define in ``envexternal.py``); every row adds itself to :data:`SETTINGS` when it is made.
A parser turns the text into a value or raises ``ValueError`` naming the variable and the
value. :meth:`Setting.get` (or :func:`read`) applies one: in strict mode (CLIs, tests) the
error propagates; on setup paths inside training it is printed once to stderr
(:func:`warn_once`) and the default is used, so a malformed variable never stops a job.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Generic, TypeVar
from urllib.parse import quote, unquote

T = TypeVar("T")
D = TypeVar("D")

# --- parsers ---------------------------------------------------------------------------------

_TRUE = frozenset({"1", "true", "yes", "on", "t", "y"})
_FALSE = frozenset({"0", "false", "no", "off", "f", "n", ""})


def parse_flag(name: str, value: str) -> bool:
    """``1/true/yes/on`` → True, ``0/false/no/off`` (or empty) → False, case-insensitive."""
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name}={value!r}: expected one of 1/true/yes/on or 0/false/no/off")


INT64_MAX: Final = 2**63 - 1
"""The largest whole number a setting may hold: records and OTLP carry signed 64-bit
integers, so a larger rank or size could not be written anywhere."""


def parse_nonneg_int(name: str, value: str) -> int:
    """A whole number from 0 to :data:`INT64_MAX` (ranks, sizes, ids)."""
    try:
        n = int(value.strip(), 10)
    except ValueError:  # not a number, or more digits than Python converts
        raise ValueError(f"{name}={value!r}: expected a whole number >= 0") from None
    if n < 0:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 0")
    if n > INT64_MAX:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 0 that fits in 64 bits")
    return n


def parse_positive_int(name: str, value: str) -> int:
    """A whole number >= 1 (sizes, counts)."""
    n = parse_nonneg_int(name, value)
    if n < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 1")
    return n


def parse_nonneg_float(name: str, value: str) -> float:
    """A finite number >= 0 (seconds, megabytes)."""
    try:
        x = float(value.strip())
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number >= 0") from None
    if not (0 <= x < float("inf")):
        raise ValueError(f"{name}={value!r}: expected a number >= 0")
    return x


def parse_path(name: str, value: str) -> str:
    """A file-system path: non-empty, no NUL (surrounding blanks are dropped)."""
    v = value.strip()
    if not v or "\0" in v:
        raise ValueError(f"{name}={value!r}: expected a path")
    return v


def parse_any(name: str, value: str) -> str:
    """Any text, as is (the meaning of its content is checked where it is used)."""
    return value


def parse_text(name: str, value: str) -> str:
    """Non-empty text without control characters (ids, names)."""
    v = value.strip()
    if not v or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"{name}={value!r}: expected non-empty text without control characters")
    return v


_TAG_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def check_tag(name: str, key: str, value: object) -> tuple[str, str]:
    """One run tag: a key of letters, digits, ``_ . -`` (starting with a letter or ``_``, at
    most 64) and a value as text without control characters; ``ValueError`` otherwise."""
    text = str(value)
    if not _TAG_KEY.match(key):
        raise ValueError(f"{name}: run tag key {key!r}: expected letters, digits, _ . - (<= 64)")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"{name}: run tag {key}={text!r}: control characters are not allowed")
    return key, text


RUN_TAGS_MAX_BYTES: Final = 4096
"""The most bytes run tags may take as ``NVRX_OTEL_RUN_TAGS`` (percent-encoded): every
process inherits them in its environment (Linux refuses to start a process with one
string over 128 KiB: a larger value would make every later subprocess fail) and every spool
header carries them."""


def _too_big(name: str, sizes: list[tuple[str, int]], total: int) -> ValueError:
    key, largest = max(sizes, key=lambda item: item[1], default=("?", total))
    return ValueError(
        f"{name}: run tags take {total} bytes as NVRX_OTEL_RUN_TAGS, more than "
        f"{RUN_TAGS_MAX_BYTES} (the largest: {key}, {largest} bytes); every process "
        "inherits them: put a large value in a record or a file instead"
    )


def check_tags_size(name: str, tags: tuple[tuple[str, str], ...]) -> None:
    """``ValueError`` naming the largest tag when ``tags`` take more than
    :data:`RUN_TAGS_MAX_BYTES` as :func:`format_tags` writes them."""
    sizes = [(k, len(f"{k}={quote(v, safe='')}")) for k, v in tags]
    total = sum(n for _, n in sizes) + max(len(sizes) - 1, 0)
    if total > RUN_TAGS_MAX_BYTES:
        raise _too_big(name, sizes, total)


def parse_tags(name: str, value: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs separated by commas, values percent-decoded (as in
    ``OTEL_RESOURCE_ATTRIBUTES``); a later key replaces an earlier one. More than
    :data:`RUN_TAGS_MAX_BYTES` is refused (the error names the largest tag, not the value)."""
    if len(value.encode(errors="replace")) > RUN_TAGS_MAX_BYTES:
        items = [item.partition("=") for item in value.split(",")]
        sizes = [(k.strip(), len(k) + len(s) + len(v)) for k, s, v in items]
        raise _too_big(name, sizes, len(value.encode(errors="replace")))
    tags: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"{name}={value!r}: expected key=value pairs separated by commas")
        k, v = check_tag(name, key.strip(), unquote(text.strip()))
        tags[k] = v
    found = tuple(tags.items())
    check_tags_size(name, found)
    return found


def format_tags(tags: tuple[tuple[str, str], ...]) -> str:
    """The text :func:`parse_tags` reads back as ``tags``."""
    return ",".join(f"{k}={quote(v, safe='')}" for k, v in tags)


# --- the table ----------------------------------------------------------------------------


def parse_auto_flag(name: str, value: str) -> bool | None:
    """``auto`` (or empty) → None (decided where it is used), else as :func:`parse_flag`."""
    if value.strip().lower() in ("auto", ""):
        return None
    try:
        return parse_flag(name, value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected auto, on or off") from None


def parse_signal(name: str, value: str) -> int | None:
    """A signal by name (``SIGUSR1``, ``USR1``, any case) or number; empty → None."""
    import signal

    v = value.strip().upper()
    if not v:
        return None
    if v.isdigit():
        number = int(v)
        if number in set(signal.valid_signals()):
            return number
    else:
        found = getattr(signal, v if v.startswith("SIG") else "SIG" + v, None)
        if isinstance(found, signal.Signals):
            return int(found)
    raise ValueError(f"{name}={value!r}: expected a signal name such as SIGUSR1")


_KINDS: Final[dict[Callable[[str, str], object], str]] = {
    parse_auto_flag: "auto/on/off",
    parse_signal: "signal name",
    parse_flag: "flag",
    parse_nonneg_int: "whole number >= 0",
    parse_positive_int: "whole number >= 1",
    parse_nonneg_float: "number >= 0",
    parse_path: "path",
    parse_text: "text",
    parse_any: "text",
    parse_tags: "key=value list",
}

SETTINGS: Final[dict[str, Setting[object, object]]] = {}
"""Every row, by variable name, in declaration order."""


@dataclass(frozen=True)
class Setting(Generic[T, D]):
    """One environment variable: its name, parser, default (None: unset, or worked out as
    the meaning says) and meaning. Creating a row adds it to :data:`SETTINGS`."""

    name: str
    parse: Callable[[str, str], T]
    default: D
    meaning: str

    def __post_init__(self) -> None:
        if self.name in SETTINGS:
            raise ValueError(f"{self.name} is declared twice")
        SETTINGS[self.name] = self  # type: ignore[assignment]

    @property
    def kind(self) -> str:
        """What the value must be, in words (for the docs)."""
        return _KINDS.get(self.parse, "text")

    def get(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        strict: bool = False,
        consequence: str = "using the default",
    ) -> T | D:
        """The parsed value from ``environ`` (default ``os.environ``), see :func:`read`."""
        return read(
            self.name,
            self.parse,
            self.default,
            environ=environ,
            strict=strict,
            consequence=consequence,
        )


# --- reading -----------------------------------------------------------------------------------

_warned: set[str] = set()
_warn_lock = threading.Lock()


_say: Callable[[str], None] | None = None


def say_warnings_with(say: Callable[[str], None] | None) -> None:
    """Hand one-time warnings to ``say`` instead of printing them with ``nvrx-otel: `` (a
    command that prefixes its own lines: the aggregator's); None restores the default."""
    global _say
    _say = say


_collecting = threading.local()


@contextmanager
def warnings_collected() -> Iterator[list[str]]:
    """Within, this thread's one-time warnings are collected in the list it gives (every
    one, also one said before) instead of printed: for a report that shows them itself
    (``nvrx-otel doctor``)."""
    outer = getattr(_collecting, "into", None)
    said: list[str] = []
    _collecting.into = said
    try:
        yield said
    finally:
        _collecting.into = outer


def warn_once(message: str) -> None:
    """Print ``message`` to stderr once per process (setup paths never raise into training)."""
    into = getattr(_collecting, "into", None)
    if into is not None:
        into.append(message)
        return
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    say = _say
    try:
        if say is not None:
            say(message)
        else:
            print(f"nvrx-otel: {message}", file=sys.stderr, flush=True)
    except Exception:  # stderr closed or broken: nothing left to tell
        pass


def _reset_after_fork() -> None:
    global _warn_lock
    _warn_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def read(
    name: str,
    parse: Callable[[str, str], T],
    default: D,
    *,
    environ: Mapping[str, str] | None = None,
    strict: bool = False,
    consequence: str = "using the default",
) -> T | D:
    """Parse ``name`` from ``environ`` (default ``os.environ``); unset or empty gives ``default``.

    A malformed value raises ``ValueError`` in strict mode; otherwise one line naming the
    variable, the value and ``consequence`` goes to stderr and ``default`` is returned.
    """
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse(name, raw)
    except ValueError as exc:
        if strict:
            raise
        warn_once(f"{exc}; {consequence}")
        return default
