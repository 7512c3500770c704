"""Per-span cost in a training process, ours beside the OpenTelemetry SDK and API.

Cases, each a ``with`` block around nothing, with three attributes, timed in interleaved
rounds (A B C ..., A B C ..., ...) so a noisy neighbour hurts every case alike; the
median round is reported:

- ``sdk``: the SDK's ``start_as_current_span`` with a ``BatchSpanProcessor`` and an
  exporter that discards (what a rank pays with the SDK);
- ``sdk_no_processor``: the same without any processor (for reference);
- ``lean``: our provider's ``start_as_current_span`` on the spool path (a ``span_start``
  and a ``span_end`` record, one ``os.write`` each);
- ``helper``: ``checkpoint_span("request", call_idx=i, iteration=i, path=...)``;
- ``helper_off``: the same helper with tracing off (our provider installed, switched off);
- ``noop``: the API's no-op tracer's ``start_as_current_span``;
- ``floor``: the least that any Python span writing both records when they happen must
  do (:func:`_floor`): the bare operations of the helper path with none of its lookups,
  checks or error handling. It is not a product; it shows how much of a helper span is
  the Python and syscall work every such design pays.

Spool files other than the live one are deleted between rounds, as the node's aggregator
would, so the writer never runs into its budget and drops.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nvrx_otel.semconv import CKPT_BYTES, CKPT_ITERATION, CKPT_PATH

ROUNDS = 7
ATTRS = {CKPT_ITERATION: 1200, CKPT_PATH: "/ckpt/iter_0001200", CKPT_BYTES: 1 << 30}


def _time_calls(call: Callable[[int], None], n: int) -> float:
    start = time.perf_counter_ns()
    for i in range(n):
        call(i)
    return (time.perf_counter_ns() - start) / n


def _sdk(with_processor: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(shutdown_on_exit=False)
    if with_processor:
        provider.add_span_processor(BatchSpanProcessor(Discard()))
    tracer = provider.get_tracer("bench")

    def call(i: int) -> None:
        with tracer.start_as_current_span("op", attributes=ATTRS):
            pass

    return call, provider.shutdown


def _floor(path: Path) -> tuple[Callable[[int], None], Callable[[], None]]:
    """Two random ids, a ``SpanContext`` built without checks, an object holding the
    span's fields, the clock twice, the attributes' JSON once, a ``span_start`` and a
    ``span_end`` line by ``%`` of fixed templates, one ``pwrite`` each to an ``O_APPEND``
    file, and the span made current and restored with the API's own context variable."""
    import os
    import random

    import orjson
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanContext, TraceFlags
    from opentelemetry.trace.span import DEFAULT_TRACE_STATE

    from nvrx_otel.tracing._scope import CONTEXT_VAR, SPAN_KEY
    from nvrx_otel.tracing.span import LeanSpan

    assert CONTEXT_VAR is not None
    var, key = CONTEXT_VAR, SPAN_KEY
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    bits, new_tuple, new_object, clock, dumps = (
        random.getrandbits,
        tuple.__new__,
        object.__new__,
        time.time_ns,
        orjson.dumps,
    )
    flags, put = TraceFlags(1), dict.__setitem__
    start_line = (
        b'{"k":"span_start","ts":%d,"trace_id":"%032x","span_id":"%016x","tf":1,'
        b'"name":"nv.nvrx.ckpt.request","scope":"nv.nvrx.ckpt","kind":0,"attrs":%b,'
        b'"links":[],"v":1,"key":"w0-%x","rank":0,"node":"node0"}\n'
    )
    end_line = start_line[:-2] + b',"start":%d,"events":[],"status":{"code":0,"msg":""}}\n'

    def call(i: int) -> None:
        ctx = var.get()
        trace_id, span_id = bits(128), bits(64)
        span = new_object(LeanSpan)
        span._ctx = new_tuple(
            SpanContext, (trace_id, span_id, False, flags, DEFAULT_TRACE_STATE, True)
        )
        span._attrs = attrs = {CKPT_ITERATION: i, CKPT_PATH: "/ckpt/iter", CKPT_BYTES: i}
        span._ids = (trace_id, span_id, 1)
        span._start = start = clock()
        encoded = dumps(attrs)
        os.pwrite(fd, start_line % (start, trace_id, span_id, encoded, i), 0)
        current = Context(ctx)
        put(current, key, span)
        token = var.set(current)
        var.reset(token)
        os.pwrite(fd, end_line % (clock(), trace_id, span_id, encoded, i, start), 0)

    def close() -> None:
        os.close(fd)
        path.unlink(missing_ok=True)

    return call, close


def _drain(directory: Path, live: Path | None) -> None:
    """Delete consumed spool files, as the aggregator would."""
    for path in directory.rglob("*.jsonl"):
        if path != live:
            path.unlink()


def run(calls: int = 20_000, rounds: int = ROUNDS) -> dict[str, Any]:
    """Time every case; returns ns per span (median of rounds) and the ratios."""
    from opentelemetry import trace

    from nvrx_otel.tracing import checkpoint_span, reset_tracing, setup_tracing
    from nvrx_otel.tracing.provider import OFF, NvrxTracerProvider

    reset_tracing()
    sdk_call, sdk_close = _sdk(with_processor=True)
    bare_call, bare_close = _sdk(with_processor=False)
    noop = trace.NoOpTracer()
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-tracing-") as tmp:
        provider = setup_tracing(spool_dir=tmp)
        assert isinstance(provider, NvrxTracerProvider) and provider.mode == "spool"
        lean_backend = provider.backend
        writer = lean_backend.sink.writer  # type: ignore[attr-defined]
        tracer = provider.get_tracer("bench")

        def lean(i: int) -> None:
            with tracer.start_as_current_span("op", attributes=ATTRS):
                pass

        def helper(i: int) -> None:
            with checkpoint_span("request", call_idx=i, iteration=i, path="/ckpt/iter"):
                pass

        def otel_noop(i: int) -> None:
            with noop.start_as_current_span("op", attributes=ATTRS):
                pass

        floor, floor_close = _floor(Path(tmp) / "floor.bin")
        samples: dict[str, list[float]] = {}
        for _ in range(rounds):
            provider.install(lean_backend)
            for name, call, n in (
                ("sdk", sdk_call, calls),
                ("lean", lean, calls),
                ("helper", helper, calls),
                ("sdk_no_processor", bare_call, calls),
                ("floor", floor, calls),
            ):
                samples.setdefault(name, []).append(_time_calls(call, n))
                _drain(Path(tmp), writer.current_path)
            Path(tmp, "floor.bin").write_bytes(b"")
            provider.install(OFF)
            for name, call, n in (
                ("helper_off", helper, calls * 4),
                ("noop", otel_noop, calls * 4),
            ):
                samples.setdefault(name, []).append(_time_calls(call, n))
            time.sleep(0.2)  # let the batch processor drain outside the timed part
        floor_close()
        reset_tracing()
    sdk_close()
    bare_close()
    ns = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "ns_per_span": ns,
        "ratios": {
            "lean/sdk": ns["lean"] / ns["sdk"],
            "helper/sdk": ns["helper"] / ns["sdk"],
            "sdk_no_processor/sdk": ns["sdk_no_processor"] / ns["sdk"],
            "helper_off/noop": ns["helper_off"] / ns["noop"],
            "floor/sdk": ns["floor"] / ns["sdk"],
        },
        "targets": {"lean/sdk": 0.5, "helper/sdk": 0.3, "helper_off/noop": 1.2},
        "calls_per_round": calls,
        "rounds": rounds,
    }
