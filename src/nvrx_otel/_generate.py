"""Generate ``semconv.py`` and ``docs/semconv.md`` from the registry under ``model/``, and
``docs/settings.md`` from the settings table in :mod:`nvrx_otel.env`.

Run ``python -m nvrx_otel._generate`` from a checkout (or pass ``--root``). ``--check``
exits 1 when the files on disk differ from what the registry generates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nvrx_otel import env

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
        return _camel(self.constant) + "Values"


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
        return "SPAN_" + _upper(self.name.removeprefix(NAMESPACE))


@dataclass(frozen=True)
class Metric:
    name: str
    instrument: str
    unit: str
    brief: str
    stability: str

    @property
    def constant(self) -> str:
        return "METRIC_" + _upper(self.name.removeprefix(NAMESPACE))


@dataclass
class Registry:
    attributes: dict[str, Attribute] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)


def _upper(dotted: str) -> str:
    return dotted.replace(".", "_").upper()


def _camel(upper: str) -> str:
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
                        raise RegistryError(f"{where}: attribute {_q(attr.id)} defined twice")
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
    constant = raw.get("constant") or _upper(attr_id.removeprefix(NAMESPACE))
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


# --- rendering ---------------------------------------------------------------------------

_HEADER = '''\
"""Semantic conventions of nvrx-otel: span groups, span kinds and attribute keys.

GENERATED from ``model/`` by ``python -m nvrx_otel._generate``. Do not edit by hand:
edit the registry and regenerate (a test fails when this file drifts from it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final
'''


def _q(text: str) -> str:
    """A double-quoted Python string literal (the registry's names are plain ASCII)."""
    return json.dumps(text)


def _doc(text: str) -> str:
    return '"""' + text.replace('"""', "'''").replace("\\", "\\\\") + '"""'


def render_python(reg: Registry) -> str:
    out: list[str] = [_HEADER]
    out.append("# --- span groups (instrumentation scopes) " + "-" * 45 + "\n")
    for scope in reg.scopes.values():
        out.append(f"{scope.constant}: Final = {_q(scope.name)}\n{_doc(scope.brief)}\n")
    out.append("\n# --- attribute keys " + "-" * 66 + "\n")
    for attr in sorted(reg.attributes.values(), key=lambda a: (a.reused, a.id)):
        out.append(f"{attr.constant}: Final = {_q(attr.id)}\n{_doc(attr.brief)}\n")
    for attr in reg.attributes.values():
        if attr.members:
            out.append(f"\n\nclass {attr.enum_name}(str, Enum):")
            out.append(f"    {_doc(f'Values of ``{attr.id}``.')}\n")
            for m in attr.members:
                out.append(f"    {_upper(m.id)} = {_q(m.value)}\n    {_doc(m.brief)}\n")
    out.append("\n# --- span kinds " + "-" * 70 + "\n")
    for scope in reg.scopes.values():
        out.append(f"\nclass {scope.enum}(str, Enum):")
        out.append(f"    {_doc(f'Span kinds of the ``{scope.name}`` group.')}\n")
        for span in _spans_of(reg, scope.name):
            out.append(f"    {span.kind.upper()} = {_q(span.kind)}\n    {_doc(span.brief)}\n")
        out.append("")
    for span in reg.spans.values():
        out.append(f"{span.constant}: Final = {_q(span.name)}\n{_doc(span.brief)}\n")
    if reg.metrics:
        out.append("\n# --- metrics " + "-" * 73 + "\n")
        for metric in reg.metrics.values():
            doc = f"{metric.brief} ({metric.instrument}, unit ``{metric.unit}``)"
            out.append(f"{metric.constant}: Final = {_q(metric.name)}\n{_doc(doc)}\n")
    out.append(_SPAN_TABLE_CODE)
    for span in reg.spans.values():
        req = tuple(ref for ref, lvl in span.attributes if lvl == "required")
        rec = tuple(ref for ref, lvl in span.attributes if lvl != "required")
        out.append(
            f"        {span.constant}: SpanDef(\n"
            f"            group={reg.scopes[span.scope].constant},\n"
            f"            kind={_q(span.kind)},\n"
            f"            name={span.constant},\n"
            f"            required={_tuple(reg, req)},\n"
            f"            recommended={_tuple(reg, rec)},\n"
            f"        ),"
        )
    out.append("    }\n)")
    out.append('"""Every span of the conventions by span name."""\n')
    out.append(
        "SPAN_KINDS: Final[Mapping[str, type[Enum]]] = MappingProxyType(\n    {\n"
        + "".join(f"        {s.constant}: {s.enum},\n" for s in reg.scopes.values())
        + "    }\n)"
    )
    out.append('"""The Enum of span kinds of each span group."""\n')
    # Blocks are joined loosely above; fold runs of blank lines to the two PEP 8 allows.
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(out)).rstrip() + "\n"


_SPAN_TABLE_CODE = '''

@dataclass(frozen=True)
class SpanDef:
    """One span of the conventions: its group (the tracer name), kind and full name."""

    group: str
    kind: str
    name: str
    required: tuple[str, ...]
    recommended: tuple[str, ...]


def span_def(group: str, kind: str | Enum) -> SpanDef:
    """Look up the span of ``group`` and ``kind``; KeyError names an unknown pair."""
    kind_name = kind.value if isinstance(kind, Enum) else kind
    try:
        return SPANS[f"{group}.{kind_name}"]
    except KeyError:
        raise KeyError(f"no span kind {kind_name!r} in span group {group!r}") from None


SPANS: Final[Mapping[str, SpanDef]] = MappingProxyType(
    {'''


def _tuple(reg: Registry, ids: Iterable[str]) -> str:
    consts = [reg.attributes[i].constant for i in ids]
    return "(" + ", ".join(consts) + ("," if len(consts) == 1 else "") + ")"


def _spans_of(reg: Registry, scope: str) -> list[Span]:
    return [s for s in reg.spans.values() if s.scope == scope]


def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(reg: Registry) -> str:
    lines = [
        "# Semantic conventions",
        "",
        "<!-- GENERATED from model/ by `python -m nvrx_otel._generate`; do not edit. -->",
        "",
        "Every name below is a constant in `nvrx_otel.semconv`; code uses the constant,",
        "never the string.",
        "",
        "## Span groups and span kinds",
        "",
        "A span group is also the tracer (instrumentation scope) name its spans are",
        "created under; a span's name is `<group>.<kind>`.",
        "",
    ]
    for scope in reg.scopes.values():
        lines += [f"### `{scope.name}` (`{scope.constant}`)", "", scope.brief, ""]
        lines += ["| kind | span name | attributes | brief |", "|---|---|---|---|"]
        for span in _spans_of(reg, scope.name):
            attrs = ", ".join(f"`{ref}` ({lvl})" for ref, lvl in span.attributes) or "—"
            lines.append(f"| `{span.kind}` | `{span.name}` | {attrs} | {_md_cell(span.brief)} |")
        lines.append("")
    if reg.metrics:
        lines += ["## Metrics", "", "| name | constant | instrument | unit | brief |"]
        lines += ["|---|---|---|---|---|"]
        for m in reg.metrics.values():
            lines.append(
                f"| `{m.name}` | `{m.constant}` | {m.instrument} | `{m.unit}` | "
                f"{_md_cell(m.brief)} |"
            )
        lines.append("")
    lines += ["## Attributes", ""]
    lines += [
        "| key | constant | type | stability | brief | examples |",
        "|---|---|---|---|---|---|",
    ]
    for attr in sorted(reg.attributes.values(), key=lambda a: (a.reused, a.id)):
        typ = attr.type
        if attr.members:
            typ = "enum: " + ", ".join(f"`{m.value}`" for m in attr.members)
        examples = ", ".join(f"`{e}`" for e in attr.examples) or "—"
        lines.append(
            f"| `{attr.id}` | `{attr.constant}` | {typ} | {attr.stability} | "
            f"{_md_cell(attr.brief)} | {_md_cell(examples)} |"
        )
    lines.append("")
    return "\n".join(lines)


def outputs(root: Path) -> dict[Path, str]:
    """What the registry under ``root/model`` generates, by destination path."""
    reg = load_registry(root / "model")
    return {
        root / "src" / "nvrx_otel" / "semconv.py": render_python(reg),
        root / "docs" / "semconv.md": render_markdown(reg),
        root / "docs" / "settings.md": env.settings_markdown(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nvrx_otel._generate", description=__doc__)
    parser.add_argument(
        "--root", type=Path, default=Path(__file__).resolve().parents[2], help="checkout root"
    )
    parser.add_argument("--check", action="store_true", help="fail when files differ")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs(args.root).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if args.check and stale:
        print("out of date: " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
