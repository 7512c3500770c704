"""A rank that emits every kind of telemetry the package has, for the semantic-convention
output check (``test_semconv_output.py``):

    python semconv_rank.py MODE OUT      MODE: spool | die_in_span | sdk

``spool`` and ``die_in_span`` log through the stdlib front end (``setup_logger``) and the
loguru one (``get_logger``), with an exception, inside the tracing helpers' spans
(fault-tolerance, checkpoint and save phases, the startup span) on the spool path;
``die_in_span`` then prints "ready" and waits inside an open span to be killed. ``sdk``
creates the same spans on the SDK path and writes them, as the SDK's own OTLP encoder
serializes them, as OTLP/JSON lines to ``OUT``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from nvrx_otel.semconv import CkptSaveSpanKind, CkptSpanKind, FtSpanKind
from nvrx_otel.tracing import checkpoint_span, ft_span, setup_tracing

USER_KEYS = ("step",)
"""Attribute keys this script passes itself (a caller's own, in no registry)."""


class OtlpJsonFile(SpanExporter):
    """Spans encoded by the SDK's OTLP encoder, appended as OTLP/JSON lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        from nvrx_otel.aggregator.otlp_encode import to_json

        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(to_json(encode_spans(spans))) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def spans() -> None:
    with ft_span(FtSpanKind.CYCLE, cycle=0):
        with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=1, iteration=100):
            pass
        with checkpoint_span(
            CkptSaveSpanKind.WRITE,
            call_idx=1,
            bytes=1 << 20,
            path="/ckpt/iter_0000100",
            strategy="torch_dist",
        ):
            pass
        try:
            with ft_span(FtSpanKind.FAULT, cycle=0):
                raise RuntimeError("a node was lost")
        except RuntimeError:
            pass


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "sdk":
        provider = setup_tracing(exporters=[OtlpJsonFile(out)])
        spans()
        provider.force_flush()  # type: ignore[attr-defined]
        return

    from nvrx_otel.logging import setup_logger
    from nvrx_otel.logging.logflow import configure_logging, get_logger

    log = setup_logger()
    setup_tracing()
    configure_logging(log_dir=str(out), script_name="rank", console_level="ERROR")
    with ft_span(FtSpanKind.RUN, cycle=0):
        log.info("stdlib record")
        get_logger("trainer").bind(step=7).info("loguru record")
        try:
            raise ValueError("bad batch")
        except ValueError:
            log.exception("step failed")
    spans()
    if mode.startswith("watched"):  # a watcher: captured output, an uncaught exception, an end
        import os
        import threading

        os.write(2, b"a line on stderr\n")
        loader = threading.Thread(target=_raise, name="loader")
        loader.start()
        loader.join()
        if mode == "watched_term":  # SIGTERMed here: its stacks and its end by signal
            print("ready", flush=True)
            time.sleep(600)
    if mode == "die_in_span":
        with ft_span(FtSpanKind.TEARDOWN, cycle=0):
            log.error("about to die inside the teardown span")
            print("ready", flush=True)
            time.sleep(600)
    print("ready", flush=True)


def _raise() -> None:
    raise OSError("shard unreadable")


if __name__ == "__main__":
    main()
