"""The report as text (Rich tables; plain when not on a terminal) or JSON."""

from __future__ import annotations

import io
from typing import IO, TYPE_CHECKING, Final

import orjson

from nvrx_otel.nodeline import local_time, ranks_phrase
from nvrx_otel.report import failures
from nvrx_otel.report.model import Failure, Report

if TYPE_CHECKING:
    from rich.console import Console


def when(report: Report, ts_ns: int | None) -> str:
    """``<local time> (+<s since the first record>)``."""
    if ts_ns is None:
        return "-"
    start = report.start_ns or ts_ns
    return f"{local_time(ts_ns)} (+{(ts_ns - start) / 1e9:.3f} s)"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.3f} s"


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def json_text(report: Report) -> str:
    return orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"


def _console(out: IO[str], buffer: IO[str]) -> Console:
    """A console writing into ``buffer`` as it would to ``out``: coloured and as wide as
    the terminal when ``out`` is one, else plain and at least 140 columns."""
    from rich.console import Console

    probe = Console(file=out)
    tty = probe.is_terminal
    width = probe.width if tty else max(probe.width, 140)
    return Console(file=buffer, force_terminal=tty, width=width, highlight=False, emoji=False)


EVIDENCE: Final = {
    failures.OWN: "its own evidence",
    failures.HUNG: "a hang: it did not fail, the others failed waiting for it",
    failures.RETURNED: "an early return: the others failed waiting for it",
    failures.COLLECTIVE: "a collective's failure: its cause is not in the records",
    failures.INFERRED: "inferred: its process ended inside a span",
}
"""What the first failure rests on, as the text report and the page say it."""


def _failure(console: Console, report: Report, title: str, f: Failure) -> None:
    from rich.text import Text

    console.print(Text(title, style="bold red"))
    console.print(
        f"  rank {f.rank} on {f.node or '?'} (cycle {f.cycle}) at {when(report, f.ts_ns)}: "
        f"{f.what}",
        markup=False,
        soft_wrap=True,  # one line, whole: what an engineer greps for
    )
    if f.trace_id:
        console.print(
            f"  trace {f.trace_id} span {f.span_id or '?'}  ({f.origin})",
            markup=False,
            soft_wrap=True,
        )


def write_text(report: Report, out: IO[str]) -> None:
    """The report as tables, written to ``out`` at once (BrokenPipeError when its reader
    has gone)."""
    buffer = io.StringIO()
    _tables(report, _console(out, buffer))
    out.write(buffer.getvalue())
    out.flush()


def _tables(report: Report, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    head = report.verdict.partition(":")[0]
    style = "bold green" if head == "OK" else "bold red"
    console.print(Text(report.verdict, style=style))
    console.print(
        Text(
            f"{report.logs} log records and {report.spans} spans from {report.files} "
            f"file{'' if report.files == 1 else 's'}, "
            f"{report.ranks} ranks on {len(report.nodes)} nodes, "
            f"{when(report, report.start_ns)} to {when(report, report.end_ns)}"
            + (f"; {_lines(report.skipped_lines)} skipped" if report.skipped_lines else ""),
            style="bold",
        )
    )
    f = report.first_failure
    if f is None:
        console.print("no failure (no ERROR record, no span with status ERROR)")
    else:
        _failure(console, report, f"first failure ({EVIDENCE.get(f.evidence, 'by time')})", f)
        if report.stopped:
            console.print(
                f"  stopped by the launcher after it (victims): {ranks_phrase(report.stopped)}",
                markup=False,
                soft_wrap=True,
            )
        if report.collective:
            console.print(
                f"  failed in a collective: {ranks_phrase(report.collective)}",
                markup=False,
                soft_wrap=True,
            )
        o = report.ordering
        if o is not None:
            style = "" if o.sure else "yellow"
            console.print(Text(f"  order: {o.note}", style=style))
        if f.last_lines:
            console.print(Text(f"  last log lines of rank {f.rank}:", style="bold"))
            for line in f.last_lines:
                console.print(
                    f"    {local_time(line.ts_ns)} [{line.level}] {line.text}", markup=False
                )
        bt = report.first_failure_by_trace
        if bt is not None:
            if bt.rank == f.rank:
                console.print(f"  by trace: the same rank ({bt.what})", markup=False)
            else:
                _failure(console, report, "first failure (by trace)", bt)
    if report.silent:
        table = Table(
            title="silent ranks (behind the others' median last record by more than the threshold)",
            title_justify="left",
        )
        for col in ("rank", "node", "cycle", "last record", "behind", "threshold", "open span"):
            table.add_column(col)
        for q in report.silent:
            last = "-" if q.last_record is None else q.last_record.text
            span = "-"
            if q.open_span is not None:
                span = f"{q.open_span.name} since {when(report, q.open_span.start_ns)}"
            table.add_row(
                str(q.rank),
                q.node or "?",
                str(q.cycle),
                f"{when(report, q.last_ns)} {last}",
                seconds(q.behind_s),
                seconds(q.threshold_s),
                span,
            )
        console.print(table)
    else:
        console.print("no silent ranks")
    _stragglers(report, console)
    if not report.cycles:
        console.print("no restart cycles (no records)")
        _phases(report, console)
        return
    table = Table(title="restart cycles", title_justify="left")
    for col in ("cycle", "from", "to", "ranks", "failed ranks", "first failure", "recovery"):
        table.add_column(col)
    for c in report.cycles:
        ff = c.first_failure
        table.add_row(
            str(c.cycle),
            when(report, c.start_ns),
            when(report, c.end_ns),
            str(c.ranks),
            str(c.failed_ranks),
            "-" if ff is None else f"rank {ff.rank}: {ff.what}",
            seconds(c.recovery_s),
        )
    console.print(table)
    _phases(report, console)


def _phases(report: Report, console: Console) -> None:
    from rich.table import Table

    if report.phases:
        table = Table(title="phases (durations across ranks)", title_justify="left")
        for col in ("phase", "spans", "ranks", "p50", "p99", "max", "slowest rank"):
            table.add_column(col, justify="left" if col == "phase" else "right")
        for p in report.phases:
            table.add_row(
                p.name,
                str(p.count),
                str(p.ranks),
                seconds(p.p50_s),
                seconds(p.p99_s),
                seconds(p.max_s),
                "?" if p.max_rank is None else str(p.max_rank),
            )
        console.print(table)
    else:
        console.print("no spans")


def _stragglers(report: Report, console: Console) -> None:
    from rich.table import Table

    t = report.thresholds
    if report.stragglers:
        table = Table(
            title=f"stragglers (mean over {t.straggler_ratio:g}x the median of the ranks' means, "
            f"and {seconds(t.straggler_min_s)} over it)",
            title_justify="left",
        )
        for col in ("phase", "rank", "node", "mean", "median", "ratio", "max", "spans"):
            table.add_column(col, justify="left" if col in ("phase", "node") else "right")
        for s in report.stragglers:
            table.add_row(
                s.phase,
                str(s.rank),
                s.node or "?",
                seconds(s.mean_s),
                seconds(s.median_s),
                f"{s.ratio:.2f}x",
                seconds(s.max_s),
                str(s.count),
            )
        console.print(table)
    else:
        console.print("no stragglers")
