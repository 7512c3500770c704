"""Loss reports of what an OTLP endpoint refused for good, sent to it later.

The node log holds every record; an endpoint may still refuse a logs request for good
(an HTTP 4xx, a gRPC error not worth a retry; refused credentials are not such a refusal:
they are retried, ``otlp_delivery``) or take it and reject part of it (an OTLP
*partial success*; the specification forbids sending those again). Either way the
records are missing at the receiver, so the receiver must get a loss report instead, the
same ``dropped <N> records ...`` WARNING the node log gets for other losses (reason
``otlp_rejected``): then, at the receiver too, records + reported losses = emitted.

A refused request is known record by record: one report per writer counts its records,
plus the counts of the loss reports it carried (a report refused loses what it accounted
for). A partial success says only how many were rejected: the report goes to the one
writer of the request, or to no writer (``rank ?``) when it held several. An
``otlp_rejected`` report refused in turn is not made again (an endpoint that refuses
everything would be asked for ever): what it accounted for is given up, said on stderr,
and stays reported in the node log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from nvrx_otel import semconv
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.state import WriterState
from nvrx_otel.semconv import DropReasonValues

UNKNOWN_WRITER: Final = ""
"""Where a loss report of records of several writers waits (no resource, rank ``?``)."""


def accounts_for(record: dict[str, Any]) -> int:
    """Writer records one log record stands for: a loss report its count, others one."""
    attrs = record.get("attrs")
    if record.get("lg") == reports.LOGGER and isinstance(attrs, dict):
        count = attrs.get(semconv.DROP_COUNT)
        if isinstance(count, int) and not isinstance(count, bool):
            return max(count, 0)
    return 1


def is_rejection_report(record: dict[str, Any]) -> bool:
    attrs = record.get("attrs")
    return (
        record.get("lg") == reports.LOGGER
        and isinstance(attrs, dict)
        and attrs.get(semconv.DROP_REASON) == DropReasonValues.OTLP_REJECTED.value
    )


@dataclass
class Rejection:
    """What became of the log records of one request the endpoint refused or rejected."""

    reports: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # writer, report
    records: int = 0  # writer records lost (loss reports are not records)
    given_up: int = 0  # records whose ``otlp_rejected`` report was refused in turn


def rejection(
    logs: dict[str, list[dict[str, Any]]],
    writers: dict[str, WriterState],
    lost: int,
) -> Rejection:
    """The loss reports, per writer, of ``lost`` records of the logs request made of
    ``logs`` (per writer, in order) that the endpoint refused or rejected."""
    out = Rejection()
    total = sum(len(rs) for rs in logs.values())
    if lost <= 0 or total == 0:
        return out
    if lost >= total:  # refused whole: each writer's records, and what its reports held
        for writer, records in logs.items():
            again = [r for r in records if is_rejection_report(r)]
            out.given_up += sum(accounts_for(r) for r in again)
            rest = [r for r in records if not is_rejection_report(r)]
            out.records += sum(1 for r in rest if r.get("lg") != reports.LOGGER)
            count = sum(accounts_for(r) for r in rest)
            if count:
                out.reports.append((writer, _report(writer, writers.get(writer), rest, count)))
        return out
    senders = [w for w, rs in logs.items() if rs]
    writer = senders[0] if len(senders) == 1 else UNKNOWN_WRITER
    records = [r for rs in logs.values() for r in rs]
    state = writers.get(writer) if writer != UNKNOWN_WRITER else None
    out.records = lost
    out.reports.append((writer, _report(writer, state, records, lost, partial=True)))
    return out


def _report(
    writer: str,
    state: WriterState | None,
    records: list[dict[str, Any]],
    count: int,
    *,
    partial: bool = False,
) -> dict[str, Any]:
    stamps = [r["ts"] for r in records if isinstance(r.get("ts"), int)]
    now = time.time_ns()
    pids = {r.get("pid") for r in records if r.get("lg") != reports.LOGGER}
    pid = pids.pop() if len(pids) == 1 and writer != UNKNOWN_WRITER else None
    first_key = next((str(r["key"]) for r in records if r.get("key")), f"{writer}-{now}")
    return reports.loss_report(
        what="dropped",
        count=count,
        reason=DropReasonValues.OTLP_REJECTED.value,
        pid=pid if isinstance(pid, int) else None,
        identity=dict(state.identity) if state is not None else {},
        first_ts=min(stamps, default=now),
        last_ts=max(stamps, default=now),
        ts=now,
        key=f"otlp-rejected-{first_key}" + (f"-{count}" if partial else ""),
    )
