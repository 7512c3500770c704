"""A small job written by hand, whose report is computed by hand in the tests.

Two nodes: ``n0`` (ranks 0, 1 and the launcher, infra rank 0) and ``n1`` (ranks 2, 3).

Cycle 0 (t = 0 .. 10.3 s)
  - every rank logs ``step <i>`` at t = i for i = 0..9
  - ``nv.nvrx.ckpt.save.write``: one span per rank lasting 1.0, 1.2, 1.1, 3.0 s (ranks 0..3)
  - ``nv.nvrx.ftl.python.imports``: two per rank: 0.1+0.3, 0.2+0.2, 0.1+0.1, 0.2+0.4 s
  - rank 2 (n1): ``nv.nvrx.ckpt.schedule`` 9.30-9.35 s; ``nv.nvrx.ckpt.request`` 9.40-10.05 s
    (linked to the schedule, ERROR) holding ``nv.nvrx.ckpt.save.stage`` 9.50-10.00 s
    (ERROR); the request's parent is the launcher's ``nv.nvrx.ftl.cycle`` 0-10.3 s (ERROR),
    all in trace 1; then an ERROR log at 10.01 s
  - rank 1 (n0): ERROR log "peer failed" at 9.95 s in trace 1 (observed 10.5 s)
Cycle 1 (t = 13.5 .. 34 s)
  - rank 0's ``nv.nvrx.ftl.run_start`` 13.5-15.0 s
  - ranks 0..2 log ``step <i>`` at t = 14..34; rank 3 at t = 14..20 then goes silent inside
    ``nv.nvrx.ckpt.save.completion_sync`` started at 20.5 s (ended by the aggregator:
    truncated, at 20.5 s)

A line in the middle of ``logs_n0.jsonl`` is not JSON.
"""

from __future__ import annotations

from pathlib import Path

from nvrx_otel import semconv as sc
from tests.report.otlpkit import at, log, logs_line, resource, sid, span, spans_line, tid

T1 = tid(1)
T2 = tid(2)
BAD_LINE = 3  # the malformed line of logs_n0.jsonl


def write(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    node = {0: "n0", 1: "n0", 2: "n1", 3: "n1"}
    logs: dict[str, list[str]] = {"n0": [], "n1": []}
    traces: dict[str, list[str]] = {"n0": [], "n1": []}
    write_s = {0: 1.0, 1: 1.2, 2: 1.1, 3: 3.0}
    imports = {0: (0.1, 0.3), 1: (0.2, 0.2), 2: (0.1, 0.1), 3: (0.2, 0.4)}
    n = 100
    for rank in range(4):
        res = resource(node[rank], rank, 0)
        records = [log(at(i), f"step {i}") for i in range(10)]
        if rank == 1:
            records.append(
                log(at(9.95), "peer failed", "ERROR", trace=T1, span=sid(77), observed=at(10.5))
            )
        if rank == 2:
            records.append(log(at(10.01), "CUDA error: illegal memory access", "ERROR", trace=T1))
        logs[node[rank]].append(logs_line(res, records))
        spans = [
            span(sc.SPAN_CKPT_SAVE_WRITE, at(2), at(2 + write_s[rank]), trace=T2,
                 span_id=sid(n := n + 1), call_idx=1),
            span(sc.SPAN_FTL_PYTHON_IMPORTS, at(0), at(imports[rank][0]), trace=T2,
                 span_id=sid(n := n + 1)),
            span(sc.SPAN_FTL_PYTHON_IMPORTS, at(0.5), at(0.5 + imports[rank][1]), trace=T2,
                 span_id=sid(n := n + 1)),
        ]  # fmt: skip
        if rank == 2:
            spans += [
                span(sc.SPAN_CKPT_SCHEDULE, at(9.3), at(9.35), trace=T1, span_id=sid(10),
                     call_idx=2),
                span(sc.SPAN_CKPT_SAVE_STAGE, at(9.5), at(10.0), trace=T1, span_id=sid(12),
                     parent=sid(11), error="RuntimeError: CUDA error", call_idx=2),
                span(sc.SPAN_CKPT_REQUEST, at(9.4), at(10.05), trace=T1, span_id=sid(11),
                     parent=sid(1), error="RuntimeError: CUDA error", links=[(T1, sid(10))],
                     call_idx=2),
            ]  # fmt: skip
        traces[node[rank]].append(spans_line(res, spans))
    launcher = resource("n0", None, None, **{sc.INFRA_RANK: 0, sc.SERVICE_NAME: "launcher"})
    traces["n0"].append(
        spans_line(
            launcher,
            [span(sc.SPAN_FTL_CYCLE, at(0), at(10.3), trace=T1, span_id=sid(1), error="fault",
                  **{sc.RESTART_CYCLE: 0})],
        )
    )  # fmt: skip
    # cycle 1
    for rank in range(4):
        res = resource(node[rank], rank, 1)
        last = 20 if rank == 3 else 34
        steps = [log(at(t), f"step {t}") for t in range(14, last + 1)]
        logs[node[rank]].append(logs_line(res, steps))
        if rank == 0:
            traces["n0"].append(
                spans_line(res, [span(sc.SPAN_FTL_RUN_START, at(13.5), at(15.0), trace=tid(3),
                                      span_id=sid(30), **{sc.RESTART_CYCLE: 1})])
            )  # fmt: skip
        if rank == 3:
            traces["n1"].append(
                spans_line(res, [span(sc.SPAN_CKPT_SAVE_COMPLETION_SYNC, at(20.5), at(20.5),
                                      trace=tid(4), span_id=sid(40), truncated=True)])
            )  # fmt: skip
    logs["n0"].insert(BAD_LINE - 1, "{not json\n")
    for name, lines in logs.items():
        (directory / f"logs_{name}.jsonl").write_text("".join(lines))
    for name, lines in traces.items():
        (directory / f"traces_{name}.jsonl").write_text("".join(lines))
    return directory
