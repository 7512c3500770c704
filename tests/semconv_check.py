"""What telemetry output says against what the semantic conventions declare.

:func:`otlp_attribute_keys` collects every attribute key from OTLP/JSON files (one request
per line, as ``--otlp-json`` and the collector's file exporter write them), so any run's
output can be checked: the aggregator's, the SDK path's, a demo's.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from nvrx_otel import _semconv_model

ROOT = Path(__file__).resolve().parents[1]

_WHERE = {
    "resource": "resource",
    "scope": "scope",
    "logRecords": "log",
    "spans": "span",
    "events": "event",
    "links": "link",
    "dataPoints": "metric",
}


def otlp_attribute_keys(paths: Iterable[Path]) -> dict[str, set[str]]:
    """Every attribute key in the OTLP/JSON files ``paths`` (logs, traces, metrics), with
    where it was seen: ``resource``, ``scope``, ``log``, ``span``, ``event``, ``link``,
    ``metric``. Keys inside map values are values, not attribute keys."""
    found: dict[str, set[str]] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "attributes" and isinstance(value, list):
                    for kv in value:
                        found.setdefault(kv["key"], set()).add(where)
                else:
                    walk(value, _WHERE.get(key, where))

    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                walk(json.loads(line), "request")
    return found


def otlp_requests(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The requests of OTLP/JSON files, one per line."""
    return [
        json.loads(line)
        for path in paths
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def registry() -> _semconv_model.Registry:
    return _semconv_model.load_registry(ROOT / "model")


def _attribute_ids(package_name: str) -> set[str]:
    package = importlib.import_module(package_name)
    ids: set[str] = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        ids.update(v for k, v in vars(module).items() if k.isupper() and isinstance(v, str))
    return ids


@cache
def otel_stable_ids() -> frozenset[str]:
    """The stable attribute ids of the installed opentelemetry-semantic-conventions."""
    return frozenset(_attribute_ids("opentelemetry.semconv.attributes"))


@cache
def otel_semconv_ids() -> frozenset[str]:
    """Every attribute id (stable and in development) of the OpenTelemetry semantic
    conventions, as the installed opentelemetry-semantic-conventions package holds them."""
    incubating = _attribute_ids("opentelemetry.semconv._incubating.attributes")
    return frozenset(incubating | otel_stable_ids())


def undeclared(keys: Iterable[str], *, own: Iterable[str] = ()) -> list[str]:
    """Keys neither the registry nor the OpenTelemetry semantic conventions declare
    (``own``: a caller's own keys, passed by the caller itself). A key in the ``nv.nvrx.``
    namespace must be in the registry."""
    declared = set(registry().attributes)
    templates = _templates()
    otel = otel_semconv_ids()
    allowed = set(own)
    return sorted(
        k
        for k in keys
        if k not in declared
        and k not in allowed
        and not any(k.startswith(t + ".") for t in templates)
        and (k.startswith(_semconv_model.NAMESPACE) or k not in otel)
    )


def _templates() -> set[str]:
    """Declared template attributes (``template[...]``): ``<id>.<key>`` is theirs."""
    return {a.id for a in registry().attributes.values() if a.type.startswith("template[")}


def never_emitted(keys: Iterable[str]) -> list[str]:
    """Attributes the registry declares that ``keys`` lacks (a template attribute is
    emitted when some ``<id>.<key>`` is)."""
    keys = set(keys)
    templates = {t for t in _templates() if any(k.startswith(t + ".") for k in keys)}
    return sorted(set(registry().attributes) - keys - templates)
