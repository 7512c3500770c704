"""The semantic-convention registry under ``model/``: its YAML read, checked and turned
into the typed :class:`Registry` that ``_generate`` renders (``semconv.py``,
``docs/semconv.md``). A registry error names the file and group that is wrong.

The YAML files follow OpenTelemetry Weaver's format for semantic-convention files
(``model/schema/semconv.schema.json``; ``tests/test_semconv_model.py`` validates them
against it). What that format has no field for is in ``model/python.toml``: the span
groups (instrumentation scopes) with their Python names, the OpenTelemetry release the
references follow, and the type and stability of each OpenTelemetry attribute the
registry references with ``ref:``.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

NAMESPACE = "nv.nvrx."
SIDE_FILE = "python.toml"
_KINDS = {"attribute_group", "span", "metric"}
_INSTRUMENTS = {"counter", "updowncounter", "gauge", "histogram"}
_TYPES = {"string", "int", "double", "boolean", "string[]", "int[]", "template[string]"}
"""Attribute types; ``template[string]`` is a prefix: ``<id>.<key>`` carries a string."""
_STABILITY = {"stable", "development", "alpha", "beta", "release_candidate"}
_REQUIREMENT_LEVELS = ("required", "recommended", "opt_in")
_IDENT = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
_KIND = re.compile(r"^[a-z][a-z0-9_]*$")
_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


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
    """An OpenTelemetry attribute the registry references (``ref:``)."""
    renamed_to: str | None = None
    """Deprecated: the attribute that replaces it."""
    deprecation_note: str = ""

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
    otel_semconv_version: str = ""
    attributes: dict[str, Attribute] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)

    @property
    def schema_url(self) -> str:
        """The schema URL of the OpenTelemetry release the references follow."""
        return f"https://opentelemetry.io/schemas/{self.otel_semconv_version}"


def upper_name(dotted: str) -> str:
    return dotted.replace(".", "_").upper()


def camel_name(upper: str) -> str:
    return "".join(part.capitalize() for part in upper.split("_"))


def _require(group: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in group:
        raise RegistryError(f"{where}: missing '{key}'")
    return group[key]


def load_registry(model_dir: Path) -> Registry:
    """Read every ``*.yaml`` under ``model_dir`` and its ``python.toml`` into one checked
    registry."""
    reg = Registry()
    files = sorted(model_dir.glob("*.yaml"))
    if not files:
        raise RegistryError(f"{model_dir}: no registry files (*.yaml)")
    otel = _load_side_file(model_dir / SIDE_FILE, reg)
    pending_refs: list[tuple[str, Mapping[str, Any]]] = []
    pending_spans: list[tuple[str, Mapping[str, Any]]] = []
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for group in doc.get("groups", []):
            where = f"{path.name}: group {group.get('id', '?')!r}"
            kind = _require(group, "type", where)
            if kind not in _KINDS:
                raise RegistryError(f"{where}: unknown type {kind!r}")
            if kind != "attribute_group":
                _stability(group, where)
            if kind == "attribute_group":
                for raw in _require(group, "attributes", where):
                    if "ref" in raw:
                        pending_refs.append((where, raw))
                        continue
                    attr = _attribute(raw, where)
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
            else:
                pending_spans.append((where, group))
    for where, raw in pending_refs:
        ref = raw["ref"]
        if ref in reg.attributes and not reg.attributes[ref].reused:
            continue  # a registry attribute listed again in a group of its uses
        spec = otel.get(ref)
        if spec is None:
            raise RegistryError(
                f"{where}: reference to {ref!r}, neither a registry attribute nor one of the "
                f"OpenTelemetry attributes in {SIDE_FILE}"
            )
        if ref in reg.attributes:
            raise RegistryError(f"{where}: attribute {ref!r} referenced twice")
        reg.attributes[ref] = Attribute(
            id=ref,
            type=spec["type"],
            brief=_require(raw, "brief", f"{where}, reference {ref!r}").strip(),
            stability=spec["stability"],
            constant=upper_name(ref),
            examples=_examples(raw),
            reused=True,
        )
    unused = sorted(set(otel) - {a.id for a in reg.attributes.values() if a.reused})
    if unused:
        raise RegistryError(f"{SIDE_FILE}: OpenTelemetry attributes never referenced: {unused}")
    for where, group in pending_spans:
        _add_span(reg, where, group)
    for attr in reg.attributes.values():
        if attr.renamed_to is not None and attr.renamed_to not in reg.attributes:
            raise RegistryError(f"{attr.id!r}: renamed to undefined attribute {attr.renamed_to!r}")
    _check_unique_constants(reg)
    return reg


def _load_side_file(path: Path, reg: Registry) -> dict[str, dict[str, str]]:
    """Read ``python.toml`` into ``reg`` (its span groups and semconv version); return its
    OpenTelemetry attributes by id."""
    where = path.name
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RegistryError(f"{where}: {exc}") from None
    version = _require(doc, "otel_semconv_version", where)
    if not _VERSION.match(str(version)):
        raise RegistryError(f"{where}: otel_semconv_version {version!r} is not X.Y.Z")
    reg.otel_semconv_version = version
    for raw in doc.get("span_group", []):
        scope = Scope(
            name=_require(raw, "name", f"{where}: span_group"),
            constant=_require(raw, "constant", f"{where}: span_group"),
            enum=_require(raw, "enum", f"{where}: span_group"),
            brief=_require(raw, "brief", f"{where}: span_group").strip(),
        )
        if not scope.name.startswith(NAMESPACE) or not _IDENT.match(scope.name):
            raise RegistryError(f"{where}: span group {scope.name!r} outside {NAMESPACE}")
        if scope.name in reg.scopes:
            raise RegistryError(f"{where}: span group {scope.name!r} declared twice")
        reg.scopes[scope.name] = scope
    otel: dict[str, dict[str, str]] = {}
    for attr_id, spec in (doc.get("otel_attributes") or {}).items():
        at = f"{where}: OpenTelemetry attribute {attr_id!r}"
        if attr_id.startswith(NAMESPACE) or not _IDENT.match(attr_id):
            raise RegistryError(f"{at}: not an OpenTelemetry attribute name")
        if _require(spec, "type", at) not in _TYPES:
            raise RegistryError(f"{at}: unknown type {spec['type']!r}")
        _stability(spec, at)
        otel[attr_id] = spec
    return otel


def _stability(group: Mapping[str, Any], where: str) -> str:
    level = _require(group, "stability", where)
    if level not in _STABILITY:
        raise RegistryError(f"{where}: unknown stability {level!r}")
    return str(level)


def _examples(raw: Mapping[str, Any]) -> tuple[Any, ...]:
    examples = raw.get("examples")
    if examples is None:
        return ()
    return tuple(examples) if isinstance(examples, list) else (examples,)


def _add_span(reg: Registry, where: str, group: Mapping[str, Any]) -> None:
    """A span group: its name is its id without ``span.``; its scope is the longest span
    group its name starts with, its kind the rest."""
    gid = str(group["id"])
    if not gid.startswith("span."):
        raise RegistryError(f"{where}: a span's id must be 'span.<span group>.<kind>'")
    name = gid.removeprefix("span.")
    scopes = [s for s in reg.scopes if name.startswith(s + ".")]
    if not scopes:
        raise RegistryError(f"{where}: {name!r} is in no span group of {SIDE_FILE}")
    scope = max(scopes, key=len)
    kind = name.removeprefix(scope + ".")
    if not _KIND.match(kind):
        raise RegistryError(f"{where}: kind {kind!r} of span group {scope!r} is not a name")
    attributes = []
    for a in _require(group, "attributes", where):
        ref = _require(a, "ref", where)
        level = a.get("requirement_level", "recommended")
        if ref not in reg.attributes:
            raise RegistryError(f"{where}: reference to undefined attribute {ref!r}")
        if level not in _REQUIREMENT_LEVELS:
            raise RegistryError(f"{where}: requirement_level {level!r} for {ref!r}")
        attributes.append((ref, level))
    span_kind = _require(group, "span_kind", where)
    reg.spans[name] = Span(
        scope=scope,
        kind=kind,
        brief=_require(group, "brief", where).strip(),
        stability=_require(group, "stability", where),
        span_kind=span_kind,
        attributes=tuple(attributes),
    )


def _attribute(raw: Mapping[str, Any], where: str) -> Attribute:
    attr_id = _require(raw, "id", where)
    where = f"{where}, attribute {attr_id!r}"
    if not _IDENT.match(attr_id):
        raise RegistryError(f"{where}: not a dotted lower-case name")
    if not attr_id.startswith(NAMESPACE):
        raise RegistryError(f"{where}: outside the {NAMESPACE} namespace")
    typ = _require(raw, "type", where)
    members: tuple[EnumMember, ...] = ()
    if isinstance(typ, dict):
        members = tuple(
            EnumMember(id=m["id"], value=m["value"], brief=m.get("brief", "").strip())
            for m in typ["members"]
        )
        for m in typ["members"]:
            _stability(m, f"{where}, member {m.get('id')!r}")
        typ = "enum"
    elif typ not in _TYPES:
        raise RegistryError(f"{where}: unknown type {typ!r}")
    deprecated = raw.get("deprecated") or {}
    return Attribute(
        id=attr_id,
        type=typ,
        brief=_require(raw, "brief", where).strip(),
        stability=_stability(raw, where),
        constant=upper_name(attr_id.removeprefix(NAMESPACE)),
        examples=_examples(raw),
        members=members,
        renamed_to=deprecated.get("renamed_to"),
        deprecation_note=str(deprecated.get("note", "")).strip(),
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
