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
from collections.abc import Iterable
from pathlib import Path

from nvrx_otel import env
from nvrx_otel._semconv_model import (
    Attribute,
    Registry,
    Span,
    load_registry,
    upper_name,
)

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
    out.append(f"SCHEMA_URL: Final = {_q(reg.schema_url)}")
    out.append(
        _doc(
            "Schema URL of the OpenTelemetry semantic-conventions release the attributes "
            "follow (the ``schema_url`` of resources and instrumentation scopes)."
        )
        + "\n"
    )
    out.append("# --- span groups (instrumentation scopes) " + "-" * 45 + "\n")
    for scope in reg.scopes.values():
        out.append(f"{scope.constant}: Final = {_q(scope.name)}\n{_doc(scope.brief)}\n")
    out.append("\n# --- attribute keys " + "-" * 66 + "\n")
    for attr in sorted(reg.attributes.values(), key=lambda a: (a.reused, a.id)):
        out.append(f"{attr.constant}: Final = {_q(attr.id)}\n{_doc(_attr_doc(attr))}\n")
    for attr in reg.attributes.values():
        if attr.members:
            out.append(f"\n\nclass {attr.enum_name}(str, Enum):")
            out.append(f"    {_doc(f'Values of ``{attr.id}``.')}\n")
            for m in attr.members:
                out.append(f"    {upper_name(m.id)} = {_q(m.value)}\n    {_doc(m.brief)}\n")
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


def _attr_doc(attr: Attribute) -> str:
    """An attribute constant's docstring: its brief, whose it is, and any deprecation."""
    text = attr.brief
    if attr.reused:
        text += f" (OpenTelemetry, {attr.stability})"
    if attr.renamed_to:
        text += f" Deprecated: use ``{attr.renamed_to}``. {attr.deprecation_note}".rstrip()
    return text


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
        "never the string. The registry (`model/`) follows OpenTelemetry Weaver's format for",
        "semantic-convention files; OpenTelemetry attributes are referenced, not redefined,",
        f"and follow semantic conventions {reg.otel_semconv_version}: resources and scopes",
        f"carry the schema URL `{reg.schema_url}` (`SCHEMA_URL`). How the registry and",
        "the output are checked: [opentelemetry-conformance.md](opentelemetry-conformance.md).",
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
        stability = attr.stability + (" (OpenTelemetry)" if attr.reused else "")
        if attr.renamed_to:
            stability += f", deprecated: use `{attr.renamed_to}`"
        brief = attr.brief
        if attr.deprecation_note:
            brief += " " + attr.deprecation_note
        lines.append(
            f"| `{attr.id}` | `{attr.constant}` | {typ} | {stability} | "
            f"{_md_cell(brief)} | {_md_cell(examples)} |"
        )
    lines.append("")
    return "\n".join(lines)


def default_text(setting: env.Setting[object, object]) -> str:
    """A row's default as the docs show it."""
    value = setting.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_markdown() -> str:
    """``docs/settings.md``: one table row per setting, from :data:`nvrx_otel.env.SETTINGS`."""
    lines = [
        "# Settings",
        "",
        "<!-- Generated from src/nvrx_otel/env.py by `python -m nvrx_otel._generate`;"
        " do not edit. -->",
        "",
        "Every environment variable nvrx-otel reads. A malformed value never stops training:",
        "the setup path prints one line naming the variable and the value and uses the",
        "default; the CLIs (`--strict`) fail with the same message.",
        "",
        "| variable | value | default | meaning |",
        "|---|---|---|---|",
    ]
    for s in env.SETTINGS.values():
        meaning = " ".join(s.meaning.split()).replace("``", "`").replace("|", "\\|")
        lines.append(f"| `{s.name}` | {s.kind} | {default_text(s)} | {meaning} |")
    return "\n".join(lines) + "\n"


def outputs(root: Path) -> dict[Path, str]:
    """What the registry under ``root/model`` generates, by destination path."""
    reg = load_registry(root / "model")
    return {
        root / "src" / "nvrx_otel" / "semconv.py": render_python(reg),
        root / "docs" / "semconv.md": render_markdown(reg),
        root / "docs" / "settings.md": settings_markdown(),
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
