"""The verdict: the report's first line, what a person paged for the job acts on.

``FAILED``, ``HUNG``, ``FAILED?`` (only inferred) or ``OK``, then who and what, where and
when, what the launcher did after it (the ranks it stopped, a restart and how the next
cycle went), and what the records are worth (how many, the losses the fault ledger
reported). Examples::

    FAILED: rank 2 (node0) raised RuntimeError: loss is NaN (train.py:88) in cycle 0 at
    +12.3 s; the launcher stopped ranks 0-1,3; cycle 1 completed. 227 records, none lost.

    HUNG: rank 1 (node0) did not fail while ranks 0,2-3 failed in a collective; its stack
    at SIGTERM ends in train.py:31 in cycle 0 at +21.0 s. 40 records, none lost.
"""

from __future__ import annotations

from nvrx_otel.nodeline import ranks_phrase
from nvrx_otel.report import failures
from nvrx_otel.report.model import Failure, Report

_HEAD = {
    failures.OWN: "FAILED",
    failures.HUNG: "HUNG",
    failures.RETURNED: "FAILED",
    failures.COLLECTIVE: "FAILED",
    failures.INFERRED: "FAILED?",
}


def _at(report: Report, ts_ns: int) -> str:
    if report.start_ns is None:
        return ""
    return f" at +{(ts_ns - report.start_ns) / 1e9:.1f} s"


def _who(f: Failure) -> str:
    return f"rank {f.rank} ({f.node or '?'})"


def _what(f: Failure) -> str:
    if f.evidence == failures.HUNG:
        return f.what.removeprefix("hung: ")
    if f.evidence == failures.COLLECTIVE:
        return f"failed in a collective: {f.what} (what caused it is not in the records)"
    if f.evidence == failures.INFERRED:
        return f"{f.what} (inferred: no exception or end of the process was recorded)"
    return f.what


def _records(report: Report) -> str:
    n = f"{report.logs} record{'s' if report.logs != 1 else ''}"
    n += f" and {report.spans} span{'s' if report.spans != 1 else ''}" if report.spans else ""
    lost = [f"{count} {what}" for what, count in sorted(report.lost.items()) if count]
    return f"{n}, " + (" and ".join(lost) + " reported lost" if lost else "none lost") + "."


def verdict(report: Report) -> str:
    """The one-paragraph answer (see the module docstring)."""
    f = report.first_failure
    silent_first = f is not None and any(
        q.rank == f.rank and q.cycle == f.cycle for q in report.silent
    )
    if f is None or (f.evidence == failures.INFERRED and silent_first):
        if report.silent:
            q = report.silent[0]
            h = next((h for h in report.hung if h.rank == q.rank), None)
            inside = f" in {h.span}" if h is not None and h.span else ""
            stack = f"; its stack at SIGTERM ends in {h.stack}" if h is not None and h.stack else ""
            more = f" (and {len(report.silent) - 1} more)" if len(report.silent) > 1 else ""
            return (
                f"HUNG: rank {q.rank} ({q.node or '?'}) went silent{inside}"
                f"{_at(report, q.last_ns)} while the others went on{more}{stack}; "
                + ("nothing failed" if f is None else "its process then ended inside it")
                + f". {_records(report)}"
            )
        if f is None:
            ranks = f"{report.ranks} rank{'s' if report.ranks != 1 else ''}"
            return f"OK: {ranks}, no failure. {_records(report)}"
    assert f is not None
    text = f"{_HEAD.get(f.evidence, 'FAILED')}: {_who(f)} {_what(f)}"
    text += f" in cycle {f.cycle}{_at(report, f.ts_ns)}"
    if report.stopped:
        text += f"; the launcher stopped {ranks_phrase(report.stopped)}"
    if report.collective and f.evidence == failures.OWN:
        text += f"; {ranks_phrase(report.collective)} then failed in a collective"
    later = [c for c in report.cycles if c.cycle > f.cycle]
    if later:
        last = later[-1]
        text += f"; restarted, cycle {last.cycle} " + (
            "completed" if last.first_failure is None else f"failed ({last.first_failure.what})"
        )
    return f"{text}. {_records(report)}"
