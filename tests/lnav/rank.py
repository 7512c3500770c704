"""A rank for the lnav tests: logs a known set of records through ``setup_logger`` (the
stdlib front end into the spool), some inside a span, and prints what it logged as JSON
lines (what lnav must find in the node log).

    python -m tests.lnav.rank TAG

Each printed row: ``msg`` (the first line of the message as the node log writes it),
``level``, ``line``, ``lines`` (physical lines of the record in the node log), ``trace_id``
and ``span_id`` (or null), and the rank's identity as the node log shows it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from opentelemetry import trace

from nvrx_otel.identity import get_identity
from nvrx_otel.logging import setup_logger
from nvrx_otel.tracing import setup_tracing

tag = sys.argv[1]
log = setup_logger()
provider = setup_tracing()
ident = get_identity()
rows: list[dict[str, Any]] = []


def row(msg: str, level: str, line: int, lines: int = 1, span: Any = None) -> None:
    ctx = span.get_span_context() if span is not None else None
    rows.append({
        "msg": msg, "level": level, "line": line, "lines": lines,
        "trace_id": f"{ctx.trace_id:032x}" if ctx else None,
        "span_id": f"{ctx.span_id:016x}" if ctx else None,
        "rank": ident.workload_rank, "lrank": ident.workload_local_rank,
        "irank": ident.infra_rank, "ilrank": ident.infra_local_rank, "node": ident.node_id,
    })  # fmt: skip


log.info("%s started", tag)
row(f"{tag} started", "INFO", sys._getframe().f_lineno - 1)
log.warning("%s two\nlines", tag)
row(f"{tag} two", "WARNING", sys._getframe().f_lineno - 1, lines=2)
log.info("%s looks like a record on its second line\n2024-01-01 00:00:00,000 [INFO] x", tag)
row(f"{tag} looks like a record on its second line", "INFO", sys._getframe().f_lineno - 1, 2)
log.info("%s colour \x1b[31mred\x1b[0m bell \x07 sep \u2028 end", tag)
row(f"{tag} colour \\x1b[31mred\\x1b[0m bell \\x07 sep \\u2028 end", "INFO",
    sys._getframe().f_lineno - 2)  # fmt: skip
with trace.get_tracer("lnav-test").start_as_current_span("step") as span:
    log.warning("%s in a span", tag)
    row(f"{tag} in a span", "WARNING", sys._getframe().f_lineno - 1, span=span)
    try:
        raise ValueError("bad batch")
    except ValueError:
        log.exception("%s step failed", tag)
        row(f"{tag} step failed", "ERROR", sys._getframe().f_lineno - 1, lines=5, span=span)
log.critical("%s done", tag)
row(f"{tag} done", "CRITICAL", sys._getframe().f_lineno - 1)
provider.force_flush()  # type: ignore[attr-defined]
for r in rows:
    print(json.dumps(r), flush=True)
