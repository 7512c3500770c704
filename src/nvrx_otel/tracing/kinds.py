"""The span helpers' kinds and short attribute names, taken from the semconv tables.

``checkpoint_span`` and ``ft_span`` accept a kind by its enum member, its value or its
span name, and attributes by short name (``iteration=`` for ``nv.nvrx.ckpt.iteration``);
these tables are built once, from ``semconv``'s span and attribute constants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from nvrx_otel import env, semconv
from nvrx_otel.semconv import (
    SPAN_GROUP_CKPT,
    SPAN_GROUP_CKPT_PHASES,
    SPAN_GROUP_FT,
    SPAN_KINDS,
    SPANS,
    SpanDef,
)


def _kinds(*groups: str) -> dict[object, SpanDef]:
    table: dict[object, SpanDef] = {}
    for sdef in SPANS.values():
        if sdef.group in groups:
            table[sdef.kind] = table[sdef.name] = sdef
    for group in groups:
        for member in SPAN_KINDS[group]:
            table[member] = semconv.span_def(group, member)
    return table


def _short_names(*groups: str) -> dict[str, str]:
    keys: set[str] = set()
    for sdef in SPANS.values():
        if sdef.group in groups:
            keys.update(sdef.required, sdef.recommended)
    prefixes = tuple(f"{group}." for group in groups)
    not_attributes = set(SPANS) | set(SPAN_KINDS)
    for value in vars(semconv).values():
        if isinstance(value, str) and value.startswith(prefixes) and value not in not_attributes:
            keys.add(value)
    ours = f"{SPAN_GROUP_FT.rsplit('.', 1)[0]}."  # the project's namespace, "nv.nvrx."
    short: dict[str, str] = {}
    for key in sorted(keys):
        name = key.rsplit(".", 1)[1] if key.startswith(ours) else key.replace(".", "_")
        short.setdefault(name, key)
    return short


_CKPT_GROUPS: Final = (SPAN_GROUP_CKPT, SPAN_GROUP_CKPT_PHASES)
CKPT_KINDS: Final[Mapping[object, SpanDef]] = _kinds(*_CKPT_GROUPS)
FT_KINDS: Final[Mapping[object, SpanDef]] = _kinds(SPAN_GROUP_FT)
CKPT_ATTRIBUTES: Final[Mapping[str, str]] = _short_names(*_CKPT_GROUPS)
"""Short attribute names ``checkpoint_span`` accepts, and their semconv keys."""
FT_ATTRIBUTES: Final[Mapping[str, str]] = _short_names(SPAN_GROUP_FT)
"""Short attribute names ``ft_span`` accepts, and their semconv keys."""


def kind_names(table: Mapping[object, SpanDef]) -> str:
    return ", ".join(sorted(k for k in table if type(k) is str and "." not in k))


def warn_unknown(helper: str, name: str, known: Mapping[str, str]) -> None:
    env.warn_once(
        f"{helper}: unknown attribute {name!r} (short names: {', '.join(sorted(known))}; "
        f"or pass a full key); recorded under the key {name!r}"
    )
