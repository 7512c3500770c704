"""Checkpoint spans linked by ``nv.nvrx.ckpt.call_idx`` within one process.

The request and finalize spans of a checkpoint link to its schedule span (finalize to the
request too); the spans are remembered here by ``call_idx``, at most ``MAX_CHECKPOINTS``
of them. Across processes :func:`checkpoint_link` gives the schedule span as a
``traceparent`` to pass along.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from itertools import islice, repeat
from typing import Any, Final

from opentelemetry.trace import Link, SpanContext

from nvrx_otel import _tracectx
from nvrx_otel.semconv import CkptSpanKind
from nvrx_otel.tracing.propagation import traceparent

MAX_CHECKPOINTS: Final = 1024
"""Checkpoints whose schedule (request) spans are remembered; beyond, the older half goes."""
_SCHEDULE: Final = CkptSpanKind.SCHEDULE.value
_REQUEST: Final = CkptSpanKind.REQUEST.value
_FINALIZE: Final = CkptSpanKind.FINALIZE.value
ByCallIdx = dict[Any, SpanContext]
schedules: Final[ByCallIdx] = {}
"""This process's schedule spans by ``call_idx``."""
requests: Final[ByCallIdx] = {}
"""This process's request spans by ``call_idx`` (nothing links to a finalize span)."""
LINKING: Final[Mapping[str, tuple[tuple[ByCallIdx, ...], ByCallIdx | None]]] = {
    _SCHEDULE: ((), schedules),
    _REQUEST: ((schedules,), requests),
    _FINALIZE: ((schedules, requests), None),
}
"""For each checkpoint span that links by ``call_idx``: the earlier spans of the same
``call_idx`` it links to (in this order), and where it is remembered for the later ones."""
_current_span = _tracectx.current_span


def linked(call_idx: Any, earlier: Sequence[ByCallIdx]) -> list[Link] | None:
    """Links to the spans of ``call_idx`` in ``earlier`` (not to the parent)."""
    found: list[Link] | None = None
    parent_id = 0
    for spans in earlier:
        ctx = spans.get(call_idx)
        if ctx is None:
            continue
        if found is None:
            found = []
            span = _current_span()
            parent_id = 0 if span is None else span.get_span_context().span_id
        if ctx.span_id != parent_id:
            found.append(Link(ctx))
    return found


def forget_oldest(kept: ByCallIdx) -> None:
    """Forget the older half of ``kept`` (now and then: it bounds the memory)."""
    try:
        old = list(islice(kept, MAX_CHECKPOINTS // 2))
    except RuntimeError:  # changed by another thread meanwhile: next time
        return
    deque(map(kept.pop, old, repeat(None)), 0)  # kept.pop(key, None) for each, in C


def checkpoint_link(call_idx: int) -> str | None:
    """The ``traceparent`` of this process's schedule span for ``call_idx`` (else its
    request span), to pass to the process that serves the checkpoint: its
    ``checkpoint_span(..., link=...)`` links back. None when there is no such span."""
    ctx = schedules.get(call_idx) or requests.get(call_idx)
    return None if ctx is None else traceparent(ctx)


def clear_links() -> None:
    """Forget every checkpoint span of this process (tests)."""
    schedules.clear()
    requests.clear()
