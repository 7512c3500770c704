"""The process's OpenTelemetry resource attributes: one resource, built one way, for the SDK
path and the spool path alike.

The SDK path (the tracer provider, the aggregator's own metrics) makes its ``Resource`` from
:func:`resource_attributes`; the spool path writes the same attributes into every spool
file's header (``res``), and the aggregator sends them as the resource of that writer's
logs and spans (OTLP and OTLP/JSON). They are what the SDK's
``Resource.create(identity attributes)`` makes, lowest precedence first:

- ``telemetry.sdk.name`` ``opentelemetry``, ``telemetry.sdk.language`` ``python``,
  ``telemetry.sdk.version`` (the installed ``opentelemetry-sdk``'s);
- ``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k2=v2``, keys and values stripped, values
  percent-decoded; an item without ``=`` or with an empty key is skipped);
- ``OTEL_SERVICE_NAME``;
- the identity attributes (ranks, node, job, host, pid, ``service.instance.id``);
- ``service.name`` ``unknown_service:<executable name>`` when none of the above set one.

A rank that only logs never loads the SDK's resources module (and the thread pool its
detectors run in): the attributes are made here, once per spool writer (per process), not
per record. Only when ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`` names a detector beyond the
SDK's built-in ``otel`` and ``service_instance`` does this call the SDK's
``Resource.create``, on both paths, so what the detectors find is in both.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote

from opentelemetry.util.types import AttributeValue

from nvrx_otel import env, semconv
from nvrx_otel.envparse import warn_once

SDK_NAME: Final = "opentelemetry"
"""``telemetry.sdk.name`` of the OpenTelemetry SDK."""
SDK_LANGUAGE: Final = "python"
"""``telemetry.sdk.language``."""
_BUILT_IN_DETECTORS: Final = frozenset({"otel", "service_instance"})
_VERSION: Final = re.compile(r"""^__version__\s*(?::[^=]*)?=\s*["']([^"']+)["']""", re.M)

_sdk_version: str | None = None


def sdk_version() -> str:
    """The installed ``opentelemetry-sdk``'s version, read from its version module's source
    (importing it would import ``opentelemetry.sdk``; ``importlib.metadata`` costs ~15 ms)."""
    global _sdk_version
    if _sdk_version is not None:
        return _sdk_version
    loaded = sys.modules.get("opentelemetry.sdk.version")
    found = getattr(loaded, "__version__", None) if loaded is not None else None
    if not isinstance(found, str):
        import opentelemetry  # the API's namespace package, already loaded

        for base in getattr(opentelemetry, "__path__", ()):
            source = os.path.join(base, "sdk", "version", "__init__.py")
            try:
                with open(source, encoding="utf-8") as f:
                    match = _VERSION.search(f.read())
            except OSError:
                continue
            if match:
                found = match.group(1)
                break
    if not isinstance(found, str):
        from opentelemetry.sdk.version import __version__

        found = __version__
    _sdk_version = found
    return found


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, AttributeValue]:
    """``OTEL_RESOURCE_ATTRIBUTES`` then ``OTEL_SERVICE_NAME``, read as the SDK's
    ``OTELResourceDetector`` reads them."""
    e = os.environ if environ is None else environ
    out: dict[str, AttributeValue] = {}
    items = e.get(env.OTEL_RESOURCE_ATTRIBUTES)
    if items:
        for item in items.split(","):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                warn_once(
                    f"{env.OTEL_RESOURCE_ATTRIBUTES}: ignoring {item!r} "
                    "(expected key=value, comma-separated)"
                )
                continue
            out[key] = unquote(value.strip())
    service = e.get(env.OTEL_SERVICE_NAME)
    if service:
        out[semconv.SERVICE_NAME] = service
    return out


def default_service_name() -> str:
    """The SDK's ``service.name`` when nothing sets one."""
    if sys.executable:
        return f"unknown_service:{os.path.basename(sys.executable)}"
    return "unknown_service"


def _extra_detectors(environ: Mapping[str, str]) -> bool:
    names = environ.get(env.OTEL_EXPERIMENTAL_RESOURCE_DETECTORS, "")
    return any(n.strip() and n.strip() not in _BUILT_IN_DETECTORS for n in names.split(","))


def resource_attributes(
    identity: Mapping[str, AttributeValue], environ: Mapping[str, str] | None = None
) -> dict[str, AttributeValue]:
    """The resource attributes of a process with ``identity`` attributes (see the module
    docstring for what goes in, and in which order)."""
    e = os.environ if environ is None else environ
    if environ is None and _extra_detectors(e):  # the SDK's detectors read os.environ
        from opentelemetry.sdk.resources import Resource

        return dict(Resource.create(dict(identity)).attributes)
    out: dict[str, AttributeValue] = {
        semconv.TELEMETRY_SDK_LANGUAGE: SDK_LANGUAGE,
        semconv.TELEMETRY_SDK_NAME: SDK_NAME,
        semconv.TELEMETRY_SDK_VERSION: sdk_version(),
    }
    out.update(from_environment(e))
    out.update(identity)
    if not out.get(semconv.SERVICE_NAME):
        out[semconv.SERVICE_NAME] = default_service_name()
    return out
