"""Tracing: provider setup, span helpers for NVRx's operations, propagation to children.

``setup_tracing()`` configures everything from the environment; the helpers and
``inject_env`` work with whatever it set up (and do nothing while tracing is off).
"""

from nvrx_otel.proctime import process_start_ns
from nvrx_otel.tracing.ckptlinks import checkpoint_link
from nvrx_otel.tracing.helpers import SpanHelper, checkpoint_span, ft_span
from nvrx_otel.tracing.propagation import inject_env
from nvrx_otel.tracing.provider import NvrxTracerProvider
from nvrx_otel.tracing.setup import reset_tracing, setup_tracing
from nvrx_otel.tracing.startup import import_span, startup_spans

__all__ = [
    "NvrxTracerProvider",
    "SpanHelper",
    "checkpoint_link",
    "checkpoint_span",
    "ft_span",
    "import_span",
    "inject_env",
    "process_start_ns",
    "reset_tracing",
    "setup_tracing",
    "startup_spans",
]
