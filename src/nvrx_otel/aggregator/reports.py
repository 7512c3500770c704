"""Synthetic WARNING records that account for records the node log does not hold.

For every writer, emitted = in the node log + reported dropped + reported corrupt. Each
loss is reported as one WARNING record in the node log (and to every other sink), with
message ``dropped <N> records from rank <R> pid <P> between <first> and <last>: <reason>``
(``corrupt <N> records ...`` for bytes that were not a record) and the ``nv.nvrx.drop.*``
attributes. Its ``key`` is derived from what it reports, so a report re-made after a
restart is recognisably the same one.
"""

from __future__ import annotations

from typing import Any, Final

from nvrx_otel import record as rec
from nvrx_otel import semconv
from nvrx_otel.aggregator.nodelog import local_time
from nvrx_otel.identity import record_fields_from_resource, record_fields_of

LOGGER: Final = "nvrx_otel.aggregator"
"""``lg`` of every synthetic record."""
FILE: Final = "nvrx_aggregator"
"""``file`` of every synthetic record (``line`` is 0): the node log shows it as the call site."""


def identity_of(source: dict[str, Any]) -> dict[str, Any]:
    """The identity fields (node, job, ranks) present in a record."""
    return record_fields_of(source)


def identity_from_header(header: dict[str, Any]) -> dict[str, Any]:
    """Identity fields from a spool header's resource attributes (before any record)."""
    res = header.get("res")
    if not isinstance(res, dict):
        return {}
    return record_fields_from_resource(res)


def loss_report(
    *,
    what: str,
    count: int,
    reason: str,
    pid: int | None,
    identity: dict[str, Any],
    first_ts: int,
    last_ts: int,
    ts: int,
    key: str,
) -> dict[str, Any]:
    """A WARNING record reporting ``count`` records lost for ``reason``.

    ``what`` is ``"dropped"`` or ``"corrupt"``; ``identity`` holds the writer's rank
    fields (absent = unknown, shown as ``?``).
    """
    rank = identity.get("rank")
    attrs: dict[str, Any] = {semconv.DROP_COUNT: count, semconv.DROP_REASON: reason}
    if rank is not None:
        attrs[semconv.DROP_RANK] = rank
    if pid is not None:
        attrs[semconv.DROP_PID] = pid
    msg = (
        f"{what} {count} records from rank {'?' if rank is None else rank} "
        f"pid {'?' if pid is None else pid} between {local_time(first_ts)} and "
        f"{local_time(last_ts)}: {reason}"
    )
    record: dict[str, Any] = {
        "v": rec.SCHEMA_VERSION,
        "k": rec.KIND_LOG,
        "ts": ts,
        "sev": rec.SEVERITY_BY_LEVEL["WARNING"],
        "lvl": "WARNING",
        "lg": LOGGER,
        "msg": msg,
        "file": FILE,
        "line": 0,
        "key": key,
        "attrs": attrs,
    }
    if pid is not None:
        record["pid"] = pid
    record.update(identity)
    return record


def drop_report(drop: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The WARNING for a writer's ``k: "drop"`` record, and how many records it accounts for."""
    count = drop.get("count")
    count = count if isinstance(count, int) and count >= 0 else 0
    ts = _int(drop.get("ts"))
    pid = drop.get("pid")
    reason = drop.get("reason")
    report = loss_report(
        what="dropped",
        count=count,
        reason=reason if isinstance(reason, str) and reason else "unknown",
        pid=pid if isinstance(pid, int) else None,
        identity=identity_of(drop),
        first_ts=_int(drop.get("first_ts"), ts),
        last_ts=_int(drop.get("last_ts"), ts),
        ts=ts,
        key=str(drop.get("key") or f"drop-{pid}-{ts}"),
    )
    return report, count


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
