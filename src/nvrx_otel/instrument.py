"""nvrx-otel as an OpenTelemetry distro and configurator, for ``opentelemetry-instrument``.

``opentelemetry-instrument python train.py`` (from ``opentelemetry-instrumentation``, the
``instrument`` extra) loads, before ``train.py`` runs, the distro named by
``OTEL_PYTHON_DISTRO`` (else the first installed one), calls its ``configure()``, then the
configurator named by ``OTEL_PYTHON_CONFIGURATOR`` (else the first installed one), then
the installed instrumentations. This package registers both entry points as
``nvrx_otel``: the distro makes ``nvrx_otel`` the configurator unless one is named, and
the configurator does what a training script would do by hand:

- ``setup_tracing()``: the tracer provider from the environment, installed globally, so
  spans of the OpenTelemetry API (and of instrumentations) go to the spool or the SDK
  path exactly as there;
- :func:`~nvrx_otel.logging.setup.setup_root_logger`: the stdlib root logger gets the
  handler ``setup_logger`` uses, so ``logging`` records reach the spool, correlated with
  the current span.

Nothing here raises into the program: both steps report a failure once on stderr.
"""

from __future__ import annotations

import os
from typing import Any, Final

from opentelemetry.instrumentation.distro import (  # type: ignore[attr-defined]
    BaseDistro,  # (the module is marked "type: ignore": mypy sees none of its names)
)
from opentelemetry.sdk._configuration import _BaseConfigurator

from nvrx_otel import env

NAME: Final = "nvrx_otel"
"""The entry point name of the distro and the configurator (``OTEL_PYTHON_DISTRO``,
``OTEL_PYTHON_CONFIGURATOR``)."""


class NvrxDistro(BaseDistro):  # type: ignore[misc]  # the base class is untyped
    """Selects the nvrx-otel configurator unless ``OTEL_PYTHON_CONFIGURATOR`` names one."""

    def _configure(self, **kwargs: Any) -> None:
        os.environ.setdefault(env.OTEL_PYTHON_CONFIGURATOR, NAME)


class NvrxConfigurator(_BaseConfigurator):
    """Sets up tracing and bridges the stdlib root logger into the spool."""

    def _configure(self, **kwargs: Any) -> None:
        configure()


def configure() -> None:
    """``setup_tracing()`` and ``setup_root_logger()``; never raises."""
    from nvrx_otel.logging.setup import setup_root_logger
    from nvrx_otel.tracing.setup import setup_tracing

    setup_tracing()
    setup_root_logger()
