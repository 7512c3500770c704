"""OTLP/JSON lines → :class:`~nvrx_otel.view.entry.Entry`.

Each line is one export request (``{"resourceLogs": [...]}``), as the aggregator's
``--otlp-json`` writes them and as the collector's file exporter does (``format: json``).
Ids may be lowercase hex (both of those) or base64 (the protobuf JSON mapping); 64-bit
integers may be strings. The identity (node, ranks) comes from the resource attributes,
a log record's own attributes of the same names taking precedence. A line of another
signal (``resourceSpans``, ``resourceMetrics``) holds no log records and gives none.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, TypeVar

import orjson

from nvrx_otel import semconv
from nvrx_otel.levels import level_of_severity, severity_of_name
from nvrx_otel.nodeline import source_file
from nvrx_otel.view.entry import Ending, Entry, Loss
from nvrx_otel.view.sources import LOSS, Malformed, collapsed

_IDENTITY: Final = {
    semconv.NODE_ID: "node",
    semconv.WORKLOAD_RANK: "rank",
    semconv.WORKLOAD_LOCAL_RANK: "lrank",
    semconv.INFRA_RANK: "irank",
    semconv.INFRA_LOCAL_RANK: "ilrank",
    semconv.RESTART_CYCLE: "cycle",
    semconv.JOB_ID: "job",
}
_CODE_FILE: Final = "code.file.path"
_CODE_LINE: Final = "code.line.number"
_STACKTRACE: Final = "exception.stacktrace"
_WANTED: Final = frozenset(
    {
        *_IDENTITY,
        _CODE_FILE,
        _CODE_LINE,
        _STACKTRACE,
        semconv.DROP_COUNT,
        semconv.DROP_REASON,
        semconv.DEDUP_COUNT,
        semconv.DEDUP_RANKS,
        semconv.EXCEPTION_TYPE,
        semconv.PROCESS_OUTCOME,
        semconv.PROCESS_SIGNAL,
        semconv.PROCESS_STACKS,
        semconv.PROCESS_EXIT_CODE,
    }
)


T = TypeVar("T")


class NotOtlp(ValueError):
    """The line is JSON but not an OTLP export request."""


def value_of(v: Any) -> Any:
    """The Python value of an OTLP/JSON ``AnyValue``."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "boolValue" in v:
        return v["boolValue"]
    if "doubleValue" in v:
        return v["doubleValue"]
    if "arrayValue" in v:
        return [value_of(x) for x in v["arrayValue"].get("values") or ()]
    if "kvlistValue" in v:
        items = v["kvlistValue"].get("values") or ()
        return {kv.get("key"): value_of(kv.get("value")) for kv in items}
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def attrs_of(items: Any, wanted: frozenset[str] = _WANTED) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items or ():
        key = kv.get("key")
        if key in wanted:
            out[key] = value_of(kv.get("value"))
    return out


def hex_id(value: Any, size: int) -> str | None:
    """A trace or span id (``size`` bytes) as lowercase hex; None when empty or invalid."""
    if not isinstance(value, str) or not value:
        return None
    if len(value) == 2 * size:
        try:
            int(value, 16)
        except ValueError:
            pass
        else:
            return None if value.strip("0") == "" else value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == size and any(raw) else None


def int_of(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _text(body: Any) -> str:
    value = value_of(body)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _entry(lr: dict[str, Any], ident: dict[str, Any], path: str, number: int) -> Entry:
    attrs = attrs_of(lr.get("attributes"))
    ids = dict(ident)
    for key, field in _IDENTITY.items():
        if key in attrs:
            ids[field] = attrs[key]
    observed = int_of(lr.get("observedTimeUnixNano"))
    ts = int_of(lr.get("timeUnixNano")) or observed or 0
    severity = int_of(lr.get("severityNumber")) or 0
    level = lr.get("severityText")
    if not isinstance(level, str) or not level:
        named = level_of_severity(severity)
        level = named.name if named is not None else "?"
    if not severity:
        severity = severity_of_name(level)
    text = _text(lr.get("body"))
    stack = attrs.get(_STACKTRACE)
    if isinstance(stack, str) and stack:
        text = f"{text}\n{stack}"
    text = text.rstrip("\n")
    code_path = attrs.get(_CODE_FILE)
    loss = None
    count = attrs.get(semconv.DROP_COUNT)
    if isinstance(count, int):
        m = LOSS.match(text)
        what = m["what"] if m is not None else "dropped"
        loss = Loss(what, count, str(attrs.get(semconv.DROP_REASON, "?")))
    node = ids.get("node")
    repeated = int_of(attrs.get(semconv.DEDUP_COUNT))
    return Entry(
        ts_ns=ts,
        level=level,
        severity=severity,
        node=None if node is None else str(node),
        rank=int_of(ids.get("rank")),
        lrank=int_of(ids.get("lrank")),
        irank=int_of(ids.get("irank")),
        ilrank=int_of(ids.get("ilrank")),
        file=source_file(code_path) if isinstance(code_path, str) else "?",
        line=int_of(attrs.get(_CODE_LINE)),
        text=text,
        trace_id=hex_id(lr.get("traceId"), 16),
        span_id=hex_id(lr.get("spanId"), 8),
        loss=loss,
        path=path,
        number=number,
        cycle=int_of(ids.get("cycle")),
        observed_ns=observed or None,
        collapsed=None if repeated is None else collapsed(repeated, attrs.get(semconv.DEDUP_RANKS)),
        exc_type=_str_or_none(attrs.get(semconv.EXCEPTION_TYPE)),
        job=None if ids.get("job") is None else str(ids["job"]),
        ending=_ending(attrs),
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _ending(attrs: dict[str, Any]) -> Ending | None:
    outcome = _str_or_none(attrs.get(semconv.PROCESS_OUTCOME))
    stacks = _str_or_none(attrs.get(semconv.PROCESS_STACKS))
    if outcome is None and stacks is None:
        return None
    return Ending(
        outcome=outcome,
        signal=_str_or_none(attrs.get(semconv.PROCESS_SIGNAL)),
        stacks=stacks,
        exit_code=int_of(attrs.get(semconv.PROCESS_EXIT_CODE)),
    )


def parse_line(line: bytes | str, path: str, number: int) -> list[Entry]:
    """The log records of one OTLP/JSON line; raises ValueError when it is not one."""
    return parse_request(orjson.loads(line), path, number)


def parse_request(doc: Any, path: str, number: int) -> list[Entry]:
    """The log records of one decoded OTLP/JSON request (``[]`` for another signal's);
    raises ValueError when it is not one."""
    if not isinstance(doc, dict):
        raise NotOtlp("not a JSON object")
    resource_logs = doc.get("resourceLogs")
    if resource_logs is None:
        if "resourceSpans" in doc or "resourceMetrics" in doc or "resourceProfiles" in doc:
            return []
        raise NotOtlp("no resourceLogs")
    out: list[Entry] = []
    for rl in resource_logs:
        res = attrs_of((rl.get("resource") or {}).get("attributes"), frozenset(_IDENTITY))
        ident = {_IDENTITY[k]: v for k, v in res.items()}
        for sl in rl.get("scopeLogs") or ():
            for lr in sl.get("logRecords") or ():
                out.append(_entry(lr, ident, path, number))
    out.sort(key=_ts)
    return out


def _ts(entry: Entry) -> int:
    return entry.ts_ns


def requests(
    lines: Iterable[tuple[int, str]],
    path: str,
    malformed: Malformed,
    parse: Callable[[str, str, int], Sequence[T]],
) -> Iterator[Sequence[T]]:
    """``parse(line, path, number)`` of each non-empty line of an OTLP/JSON lines file (its
    records, request by request); a line it refuses (ValueError and the errors of a JSON
    of another shape) goes to ``malformed``."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            items = parse(line, path, number)
        except (ValueError, TypeError, AttributeError, KeyError):
            malformed(path, number, line)
            continue
        if items:
            yield items


def read_otlp_json(
    lines: Iterable[tuple[int, str]], path: str, malformed: Malformed
) -> Iterator[Entry]:
    """The log records of an OTLP/JSON lines file, request by request (each request's
    records in time order)."""
    for entries in requests(lines, path, malformed, parse_line):
        yield from entries
