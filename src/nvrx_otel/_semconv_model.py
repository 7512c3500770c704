"""The semantic-convention registry under ``model/``: its YAML read, checked and turned
into the typed :class:`Registry` that ``_generate`` renders (``semconv.py``,
``docs/semconv.md``). A registry error names the file and group that is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NAMESPACE = "nv.nvrx."
_KINDS = {"attribute_group", "reused", "scope", "span", "metric"}
_INSTRUMENTS = {"counter", "updowncounter", "gauge", "histogram"}
_TYPES = {"string", "int", "double", "boolean", "string[]", "int[]"}
_REQUIREMENT_LEVELS = ("required", "recommended", "opt_in")
_IDENT = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")


class RegistryError(ValueError):
    """The registry is malformed; the message names the file and the group."""


@dataclass(frozen=True)
class EnumMember:
    id: str
    value: str
    brief: str


@dataclass(frozen=True)
class Attribute:
    id: str
    type: str
    brief: str
    stability: str
    constant: str
    examples: tuple[Any, ...]
    members: tuple[EnumMember, ...] = ()
    reused: bool = False

    @property
    def enum_name(self) -> str:
        return camel_name(self.constant) + "Values"


@dataclass(frozen=True)
class Scope:
    name: str
    constant: str
    enum: str
    brief: str


@dataclass(frozen=True)
class Span:
    scope: str
    kind: str
    brief: str
    stability: str
    span_kind: str
    attributes: tuple[tuple[str, str], ...]  # (attribute id, requirement level)

    @property
    def name(self) -> str:
        return f"{self.scope}.{self.kind}"

    @property
    def constant(self) -> str:
        return "SPAN_" + upper_name(self.name.removeprefix(NAMESPACE))


@dataclass(frozen=True)
class Metric:
    name: str
    instrument: str
    unit: str
    brief: str
    stability: str

    @property
    def constant(self) -> str:
        return "METRIC_" + upper_name(self.name.removeprefix(NAMESPACE))


@dataclass
class Registry:
    attributes: dict[str, Attribute] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)


def upper_name(dotted: str) -> str:
    return dotted.replace(".", "_").upper()


def camel_name(upper: str) -> str:
    return "".join(part.capitalize() for part in upper.split("_"))


def _require(group: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in group:
        raise RegistryError(f"{where}: missing '{key}'")
    return group[key]


def load_registry(model_dir: Path) -> Registry:
    """Read every ``*.yaml`` under ``model_dir`` into one checked registry."""
    reg = Registry()
    files = sorted(model_dir.glob("*.yaml"))
    if not files:
        raise RegistryError(f"{model_dir}: no registry files (*.yaml)")
    pending_spans: list[tuple[str, Mapping[str, Any]]] = []
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for group in doc.get("groups", []):
            where = f"{path.name}: group {group.get('id', '?')!r}"
            kind = _require(group, "type", where)
            if kind not in _KINDS:
                raise RegistryError(f"{where}: unknown type {kind!r}")
            if kind in ("attribute_group", "reused"):
                for raw in _require(group, "attributes", where):
                    attr = _attribute(raw, where, reused=kind == "reused")
                    if attr.id in reg.attributes:
                        raise RegistryError(f"{where}: attribute {attr.id!r} defined twice")
                    reg.attributes[attr.id] = attr
            elif kind == "metric":
                metric = Metric(
                    name=_require(group, "metric_name", where),
                    instrument=_require(group, "instrument", where),
                    unit=_require(group, "unit", where),
                    brief=_require(group, "brief", where).strip(),
                    stability=_require(group, "stability", where),
                )
                if metric.instrument not in _INSTRUMENTS:
                    raise RegistryError(f"{where}: unknown instrument {metric.instrument!r}")
                if not metric.name.startswith(NAMESPACE):
                    raise RegistryError(f"{where}: outside the {NAMESPACE} namespace")
                if group["id"] != f"metric.{metric.name}":
                    raise RegistryError(f"{where}: id must be 'metric.{metric.name}'")
                reg.metrics[metric.name] = metric
            elif kind == "scope":
                scope = Scope(
                    name=_require(group, "name", where),
                    constant=_require(group, "constant", where),
                    enum=_require(group, "enum", where),
                    brief=_require(group, "brief", where).strip(),
                )
                if group["id"] != f"scope.{scope.name}":
                    raise RegistryError(f"{where}: id must be 'scope.{scope.name}'")
                reg.scopes[scope.name] = scope
            else:
                pending_spans.append((where, group))
    for where, group in pending_spans:
        span = Span(
            scope=_require(group, "scope", where),
            kind=_require(group, "kind", where),
            brief=_require(group, "brief", where).strip(),
            stability=_require(group, "stability", where),
            span_kind=group.get("span_kind", "internal"),
            attributes=tuple(
                (_require(a, "ref", where), a.get("requirement_level", "recommended"))
                for a in group.get("attributes", [])
            ),
        )
        if span.scope not in reg.scopes:
            raise RegistryError(f"{where}: unknown scope {span.scope!r}")
        if group["id"] != f"span.{span.name}":
            raise RegistryError(f"{where}: id must be 'span.{span.name}' (<scope>.<kind>)")
        for ref, level in span.attributes:
            if ref not in reg.attributes:
                raise RegistryError(f"{where}: reference to undefined attribute {ref!r}")
            if level not in _REQUIREMENT_LEVELS:
                raise RegistryError(f"{where}: requirement_level {level!r} for {ref!r}")
        reg.spans[span.name] = span
    _check_unique_constants(reg)
    return reg


def _attribute(raw: Mapping[str, Any], where: str, *, reused: bool) -> Attribute:
    attr_id = _require(raw, "id", where)
    where = f"{where}, attribute {attr_id!r}"
    if not _IDENT.match(attr_id):
        raise RegistryError(f"{where}: not a dotted lower-case name")
    if not reused and not attr_id.startswith(NAMESPACE):
        raise RegistryError(f"{where}: outside the {NAMESPACE} namespace")
    typ = _require(raw, "type", where)
    members: tuple[EnumMember, ...] = ()
    if isinstance(typ, dict):
        members = tuple(
            EnumMember(id=m["id"], value=m["value"], brief=m.get("brief", "").strip())
            for m in typ["members"]
        )
        typ = "enum"
    elif typ not in _TYPES:
        raise RegistryError(f"{where}: unknown type {typ!r}")
    constant = raw.get("constant") or upper_name(attr_id.removeprefix(NAMESPACE))
    return Attribute(
        id=attr_id,
        type=typ,
        brief=_require(raw, "brief", where).strip(),
        stability=raw.get("stability", "stable" if reused else "development"),
        constant=constant,
        examples=tuple(raw.get("examples", ())),
        members=members,
        reused=reused,
    )


def _check_unique_constants(reg: Registry) -> None:
    names = (
        [a.constant for a in reg.attributes.values()]
        + [s.constant for s in reg.scopes.values()]
        + [s.constant for s in reg.spans.values()]
        + [m.constant for m in reg.metrics.values()]
    )
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RegistryError(f"constant names defined twice: {', '.join(dupes)}")
