"""Span attributes as OTLP can carry them, within the span limits the SDK would apply.

Plain values (str, bool, int, float) pass untouched; that common case costs one dict
copy and a type check per value, done in C. Everything else is
converted (sequences to lists, str/int/float subclasses to their base type, other
objects to their ``str()``) or dropped (None), never raised about.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.util import types

from nvrx_otel import env

PLAIN: Final = frozenset({str, bool, int, float})
"""Attribute value types kept as they are."""
all_plain: Final = PLAIN.issuperset
"""``all_plain(map(type, values))``: every value is of a plain type."""
_NO_LIMIT: Final = sys.maxsize


class Owned(dict[str, Any]):
    """Attributes built for one span alone, with plain values and non-empty str keys: the
    span takes the dict as it is instead of copying and checking it."""

    __slots__ = ()


@dataclass(frozen=True)
class Limits:
    """Span limits, as the SDK reads them (OTEL_SPAN_*_COUNT_LIMIT...; default 128)."""

    attributes: int = 128
    events: int = 128
    links: int = 128
    event_attributes: int = 128
    link_attributes: int = 128
    value_length: int | None = None

    @classmethod
    def from_env(cls) -> Limits:
        """The limits the SDK would use; malformed variables are reported, defaults kept."""
        try:
            from opentelemetry.sdk.trace import SpanLimits

            sdk = SpanLimits()
        except ValueError as exc:
            env.warn_once(f"{exc}; using the default span limits (128)")
            return cls()

        def cap(value: int | None) -> int:
            return _NO_LIMIT if value is None else value

        return cls(
            attributes=cap(sdk.max_span_attributes),
            events=cap(sdk.max_events),
            links=cap(sdk.max_links),
            event_attributes=cap(sdk.max_event_attributes),
            link_attributes=cap(sdk.max_link_attributes),
            value_length=sdk.max_span_attribute_length,
        )


def clean_value(value: Any, max_len: int | None) -> Any:
    """An attribute value OTLP can carry, or None to drop it.

    Plain values pass; sequences of plain values become lists; subclasses (str enums,
    numpy floats) become their base type; anything else becomes its ``str()``."""
    t = type(value)
    if t is str:
        return value if max_len is None else value[:max_len]
    if t is bool or t is int or t is float:
        return value
    if value is None:
        return None
    if isinstance(value, str):
        text = str.__str__(value)
        return text if max_len is None else text[:max_len]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        items = [clean_value(v, max_len) if v is not None else None for v in value]
        kinds = {type(v) for v in items if v is not None}
        if len(kinds) <= 1 and kinds <= PLAIN:
            return items
        return str(list(value))
    try:
        text = str(value)
    except Exception:  # a broken __str__ must not break the span
        text = f"<unprintable {type(value).__qualname__}>"
    return text if max_len is None else text[:max_len]


def clean_attributes(
    attributes: types.Attributes | Mapping[str, Any], cap: int, max_len: int | None
) -> tuple[dict[str, Any], int]:
    """A fresh attribute dict within ``cap`` entries, and how many were dropped."""
    if not attributes:
        return {}, 0
    if type(attributes) is Owned and len(attributes) <= cap and max_len is None:
        return attributes, 0
    if len(attributes) <= cap and max_len is None:
        out = dict(attributes)  # the common case: plain values, checked in C, copied once
        if all_plain(map(type, out.values())) and "" not in out:
            return out, 0  # (a key that is not a str is str()-ed when the record is encoded)
    out = {}
    dropped = 0
    for key, value in attributes.items():
        if type(key) is not str or not key:
            continue
        value = clean_value(value, max_len)
        if value is None:
            continue
        if len(out) >= cap and key not in out:
            dropped += 1
            continue
        out[key] = value
    return out, dropped
