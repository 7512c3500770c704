"""Samplers from ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``, for both span paths.

The lean (spool) path needs only a yes/no per new span, so a sampler here is a small
frozen value; :meth:`SamplerConfig.to_sdk` gives the SDK's equivalent for the path
without a spool. The ratio test is the SDK's (the low 64 bits of the trace id against
``round(ratio * 2**64)``), so every process, on either path, decides a trace alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nvrx_otel import env

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler

ALWAYS_ON: Final = "always_on"
ALWAYS_OFF: Final = "always_off"
TRACE_ID_RATIO: Final = "traceidratio"
PARENT_ALWAYS_ON: Final = "parentbased_always_on"
PARENT_ALWAYS_OFF: Final = "parentbased_always_off"
PARENT_TRACE_ID_RATIO: Final = "parentbased_traceidratio"
DEFAULT: Final = PARENT_ALWAYS_ON

KNOWN: Final = frozenset(
    {
        ALWAYS_ON,
        ALWAYS_OFF,
        TRACE_ID_RATIO,
        PARENT_ALWAYS_ON,
        PARENT_ALWAYS_OFF,
        PARENT_TRACE_ID_RATIO,
    }
)
_LOW_64: Final = (1 << 64) - 1


@dataclass(frozen=True)
class SamplerConfig:
    """One sampler: its OTel name and, for the ratio samplers, the ratio."""

    name: str = DEFAULT
    ratio: float = 1.0

    @property
    def parent_based(self) -> bool:
        """True when a span with a valid parent follows the parent's sampled flag."""
        return self.name.startswith("parentbased_")

    @property
    def bound(self) -> int:
        """Root spans are sampled when ``trace_id & (2**64 - 1) < bound``."""
        if self.name in (ALWAYS_ON, PARENT_ALWAYS_ON):
            return 1 << 64
        if self.name in (ALWAYS_OFF, PARENT_ALWAYS_OFF):
            return 0
        return round(self.ratio * (1 << 64))

    def sample_root(self, trace_id: int) -> bool:
        """The decision for a span without a valid parent (or any span, not parent-based)."""
        return (trace_id & _LOW_64) < self.bound

    def to_sdk(self) -> Sampler:
        """The SDK sampler that decides as this one does."""
        from opentelemetry.sdk.trace import sampling

        root: Sampler
        if self.name in (ALWAYS_ON, PARENT_ALWAYS_ON):
            root = sampling.ALWAYS_ON
        elif self.name in (ALWAYS_OFF, PARENT_ALWAYS_OFF):
            root = sampling.ALWAYS_OFF
        else:
            root = sampling.TraceIdRatioBased(self.ratio)
        return sampling.ParentBased(root) if self.parent_based else root


def _parse_ratio(name: str, value: str) -> float:
    try:
        ratio = float(value.strip())
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a ratio between 0 and 1") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{name}={value!r}: expected a ratio between 0 and 1")
    return ratio


def sampler_from_env(environ: Mapping[str, str] | None = None) -> SamplerConfig:
    """The sampler ``OTEL_TRACES_SAMPLER``/``_ARG`` select; never raises.

    An unknown sampler name or a bad ratio is reported once on stderr and the default
    (``parentbased_always_on``, ratio 1.0) is used instead, as the SDK does.
    """
    e = os.environ if environ is None else environ
    name = e.get(env.OTEL_TRACES_SAMPLER, "").strip().lower() or DEFAULT
    if name not in KNOWN:
        env.warn_once(
            f"{env.OTEL_TRACES_SAMPLER}={name!r} is not a known sampler "
            f"({', '.join(sorted(KNOWN))}); using {DEFAULT}"
        )
        return SamplerConfig()
    ratio = 1.0
    if name in (TRACE_ID_RATIO, PARENT_TRACE_ID_RATIO):
        ratio = env.read(
            env.OTEL_TRACES_SAMPLER_ARG,
            _parse_ratio,
            1.0,
            environ=e,
            consequence="sampling every trace (ratio 1.0)",
        )
    return SamplerConfig(name, ratio)
