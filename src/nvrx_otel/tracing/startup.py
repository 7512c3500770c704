"""Startup spans (``nv.nvrx.ftl.python``): how long a process took to get going.

``startup_spans()`` is the ``startup`` span, from the process's real start time as the
operating system recorded it (``/proc/self/stat``) until the block ends (or now, with
``.record()``); ``import_span()`` is an ``imports`` span around imports. Both are
:class:`~nvrx_otel.tracing.helpers.SpanHelper`: context managers and decorators, sync and
async, so the imports nest under the startup span::

    with startup_spans():
        with import_span():
            import torch
        setup_logger()
"""

from __future__ import annotations

import time
from typing import Any, Final

from nvrx_otel import env
from nvrx_otel.proctime import process_start_ns
from nvrx_otel.semconv import SPAN_GROUP_STARTUP, StartupSpanKind, span_def
from nvrx_otel.tracing.helpers import HelperSpec, SpanHelper

_STARTUP: Final = span_def(SPAN_GROUP_STARTUP, StartupSpanKind.STARTUP)
_IMPORTS: Final = span_def(SPAN_GROUP_STARTUP, StartupSpanKind.IMPORTS)
_IMPORTED_NS: Final = time.time_ns()  # the fallback where the OS cannot tell
_STARTUP_SPEC: Final = HelperSpec("startup_spans", {}, None)
_IMPORTS_SPEC: Final = HelperSpec("import_span", {}, None)


def startup_spans(**attributes: Any) -> SpanHelper:
    """The ``nv.nvrx.ftl.python.startup`` span from the process's start until the block
    (or decorated function) ends; ``startup_spans().record()`` ends it now. Where the OS
    does not tell the start time, the time nvrx-otel's tracing was imported is used."""
    start = process_start_ns()
    if start is None:
        env.warn_once(
            "cannot read this process's start time from /proc; the startup span starts "
            "when nvrx_otel.tracing was imported"
        )
        start = _IMPORTED_NS
    return SpanHelper(_STARTUP, _STARTUP_SPEC, None, attributes, start_time=start)


def import_span(**attributes: Any) -> SpanHelper:
    """An ``nv.nvrx.ftl.python.imports`` span around a block of imports (or a function
    that imports). Attributes are full keys, e.g. ``**{"my.modules": "torch"}``."""
    return SpanHelper(_IMPORTS, _IMPORTS_SPEC, None, attributes)
