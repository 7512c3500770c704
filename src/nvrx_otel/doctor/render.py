"""The doctor's report as text (one screen, plain lines) or JSON."""

from __future__ import annotations

from typing import Any

from nvrx_otel.aggregator.health import human_bytes, plural
from nvrx_otel.doctor.report import Report


def _value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    return str(value)


def text(report: Report) -> str:
    lines = ["identity"]
    lines += [f"  {k:<20} {v}" for k, v in report.identity.items()]
    section = ""
    for s in report.config:
        if s.section != section:
            section = s.section
            lines.append(f"configuration: {section}")
        lines.append(f"  {s.name:<32} {_value(s.value):<32} ({s.source})")
    lines += _spool(report)
    lines.append("OTLP endpoints")
    if not report.probes:
        lines.append("  none in use (no OTLP endpoint variable set, spans not on the SDK path)")
    for p in report.probes:
        lines.append(f"  {p.line()}")
        if p.tls is not None:
            lines.append(f"    TLS: {p.tls.line()}")
    for title, items in (("warnings", report.warnings), ("problems", report.problems)):
        if items:
            lines.append(f"{title}")
            lines += [f"  - {item}" for item in items]
    verdict = (
        f"{plural(len(report.problems), 'problem')}: records would be lost"
        if report.problems
        else "no problem found"
    )
    lines.append(f"doctor: {verdict}")
    return "\n".join(lines) + "\n"


def _spool(report: Report) -> list[str]:
    st = report.spool
    lines = ["spool"]
    if st.root is None or st.job_dir is None:
        return [*lines, "  not configured"]
    if not st.exists:
        lines.append(f"  {st.job_dir}: not made yet (the first writer makes it)")
    else:
        agg = (
            f"served by aggregator pid {st.aggregator_pid}"
            if st.aggregator_pid
            else "no aggregator"
        )
        lines.append(
            f"  {st.job_dir}: {plural(len(st.writers), 'writer')} ({st.live_writers} live), "
            f"backlog {human_bytes(st.backlog)}, {agg}"
        )
    for w in st.writers:
        budget = human_bytes(w.budget) if w.budget else "?"
        lines.append(
            f"    {w.proc} pid {w.pid} writer {w.writer}: {'live' if w.live else 'gone'}, "
            f"{plural(w.files, 'file')}, {human_bytes(w.held)} of {budget} budget, "
            f"backlog {human_bytes(w.backlog)}"
        )
    if st.free_bytes is not None:
        lines.append(f"  free space: {human_bytes(st.free_bytes)}")
    for job in st.other_jobs:
        served = "served" if job.served else "not served"
        lines.append(
            f"  other job {job.path}: {plural(job.files, 'spool file')}, "
            f"{human_bytes(job.size)}, {served}"
        )
    return lines


def as_json(report: Report) -> dict[str, Any]:
    st = report.spool
    return {
        "identity": report.identity,
        "config": report.config.as_dict(),
        "spool": {
            "root": st.root,
            "job_dir": None if st.job_dir is None else str(st.job_dir),
            "exists": st.exists,
            "unusable": st.unusable or None,
            "aggregator_pid": st.aggregator_pid,
            "backlog": st.backlog,
            "free_bytes": st.free_bytes,
            "writers": [vars(w) for w in st.writers],
            "other_jobs": [vars(j) for j in st.other_jobs],
        },
        "otlp": [
            {
                "signal": p.signal,
                "endpoint": p.endpoint,
                "ok": p.ok,
                "detail": p.detail,
                "tls": None if p.tls is None else vars(p.tls),
            }
            for p in report.probes
        ],
        "warnings": report.warnings,
        "problems": report.problems,
        "status": report.status,
    }
