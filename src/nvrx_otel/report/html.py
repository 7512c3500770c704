"""``--html``: one self-contained page: the report's tables and the timeline picture
(embedded as a PNG when matplotlib is installed, else a line saying so)."""

from __future__ import annotations

import base64
import html
import os
import tempfile
from collections.abc import Iterable, Sequence

from nvrx_otel.nodeline import local_time, ranges
from nvrx_otel.report.model import Report
from nvrx_otel.report.render import EVIDENCE, seconds, when
from nvrx_otel.report.timeline import Timeline

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f0f0f0; }
.bad { color: #b00; } .warn { color: #a60; } .ok { color: #070; }
pre { background: #f7f7f7; padding: 0.5em; font-size: 12px; overflow-x: auto; }
img { max-width: 100%; border: 1px solid #ddd; }
"""


def _table(title: str, head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    e = html.escape
    body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f"<h2>{e(title)}</h2><p>none</p>"
    cols = "".join(f"<th>{e(h)}</th>" for h in head)
    return f"<h2>{e(title)}</h2><table><tr>{cols}</tr>{body}</table>"


def _picture(report: Report, timeline: Timeline) -> str:
    from nvrx_otel.report import png

    fd, path = tempfile.mkstemp(suffix=".png")
    os.close(fd)
    try:
        png.draw(report, timeline, path)
        with open(path, "rb") as fh:
            data = base64.b64encode(fh.read()).decode()
    except png.MissingMatplotlib as exc:
        return f"<p class='warn'>No picture: {html.escape(str(exc))}</p>"
    finally:
        os.unlink(path)
    return f"<img alt='per-rank timeline' src='data:image/png;base64,{data}'>"


def page(report: Report, timeline: Timeline) -> str:
    """The page's HTML."""
    e = html.escape
    r = report
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>nvrx-otel report</title>",
        f"<style>{_STYLE}</style></head><body><h1>nvrx-otel report</h1>",
        f"<p class='{'ok' if r.verdict.startswith('OK') else 'bad'}'><b>{e(r.verdict)}</b></p>",
        f"<p>{r.logs} log records and {r.spans} spans from {r.files} files, {r.ranks} ranks "
        f"on {len(r.nodes)} nodes, {e(when(r, r.start_ns))} to {e(when(r, r.end_ns))}.</p>",
        _picture(r, timeline),
    ]
    f = r.first_failure
    parts.append("<h2>First failure</h2>")
    if f is None:
        parts.append("<p>none</p>")
    else:
        parts.append(
            f"<p class='bad'>rank {f.rank} on {e(f.node or '?')} (cycle {f.cycle}) at "
            f"{e(when(r, f.ts_ns))}: {e(f.what)}</p>"
        )
        parts.append(f"<p>it rests on {e(EVIDENCE.get(f.evidence, '?'))}</p>")
        if r.stopped:
            parts.append(
                f"<p>stopped by the launcher after it (victims): {e(ranges(r.stopped))}</p>"
            )
        if r.collective:
            parts.append(f"<p>failed in a collective: {e(ranges(r.collective))}</p>")
        if r.ordering is not None:
            cls = "" if r.ordering.sure else " class='warn'"
            parts.append(f"<p{cls}>order: {e(r.ordering.note)}</p>")
        bt = r.first_failure_by_trace
        if bt is not None:
            parts.append(f"<p>by trace: rank {bt.rank} on {e(bt.node or '?')}: {e(bt.what)}</p>")
        if f.trace_id:
            parts.append(f"<p>trace {e(f.trace_id)} span {e(f.span_id or '?')} ({e(f.origin)})</p>")
        if f.last_lines:
            lines = "\n".join(
                f"{local_time(ln.ts_ns)} [{ln.level}] {ln.text}" for ln in f.last_lines
            )
            parts.append(f"<pre>{e(lines)}</pre>")
    parts.append(
        _table(
            "Silent ranks",
            ("rank", "node", "cycle", "last record", "behind", "threshold", "open span"),
            (
                (
                    s.rank,
                    s.node or "?",
                    s.cycle,
                    f"{when(r, s.last_ns)} {s.last_record.text if s.last_record else ''}",
                    seconds(s.behind_s),
                    seconds(s.threshold_s),
                    s.open_span.name if s.open_span else "-",
                )
                for s in r.silent
            ),
        )
    )
    parts.append(
        _table(
            "Stragglers",
            ("phase", "rank", "node", "mean", "median", "ratio", "max", "spans"),
            (
                (
                    s.phase,
                    s.rank,
                    s.node or "?",
                    seconds(s.mean_s),
                    seconds(s.median_s),
                    f"{s.ratio:.2f}x",
                    seconds(s.max_s),
                    s.count,
                )
                for s in r.stragglers
            ),
        )
    )
    parts.append(
        _table(
            "Restart cycles",
            ("cycle", "from", "to", "ranks", "failed ranks", "first failure", "recovery"),
            (
                (
                    c.cycle,
                    when(r, c.start_ns),
                    when(r, c.end_ns),
                    c.ranks,
                    c.failed_ranks,
                    f"rank {c.first_failure.rank}: {c.first_failure.what}"
                    if c.first_failure
                    else "-",
                    seconds(c.recovery_s),
                )
                for c in r.cycles
            ),
        )
    )
    parts.append(
        _table(
            "Phases (durations across ranks)",
            ("phase", "spans", "ranks", "p50", "p99", "max", "slowest rank"),
            (
                (
                    p.name,
                    p.count,
                    p.ranks,
                    seconds(p.p50_s),
                    seconds(p.p99_s),
                    seconds(p.max_s),
                    "?" if p.max_rank is None else p.max_rank,
                )
                for p in r.phases
            ),
        )
    )
    parts.append("</body></html>\n")
    return "".join(parts)
