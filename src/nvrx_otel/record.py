"""The one record type that flows from a rank to the collector, and its codec.

A spool file is JSON lines (UTF-8, one record per ``\\n``-terminated line). Its first line
is a header unique to its writer; every further line is one record whose ``k`` says what
it is. Every front end (stdlib, loguru, the span exporter) produces these; every sink (node
log, OTLP) consumes them. The full field list is in ``docs/spool-format.md``.

Records stay plain dicts (what ``orjson.loads`` returns) so the aggregator pays nothing to
convert them; the TypedDicts below say which keys exist.
"""

from __future__ import annotations

import re
from typing import Any, Final, TypedDict

import orjson

from nvrx_otel.levels import SEVERITY_BY_LEVEL as SEVERITY_BY_LEVEL
from nvrx_otel.levels import severity_of as severity_of

SCHEMA_VERSION: Final = 1
"""``v`` of every line; readers refuse other versions as corrupt rather than guess."""

KIND_HEADER: Final = "hdr"
KIND_LOG: Final = "log"
KIND_DROP: Final = "drop"
KIND_SPAN_START: Final = "span_start"
KIND_SPAN_END: Final = "span_end"


class Header(TypedDict, total=False):
    """First line of a spool file: who writes it."""

    v: int
    k: str  # "hdr"
    w: str  # writer id, 16 hex digits (random 64 bit), unique per process
    f: int  # file index of this writer, 0, 1, 2, ... (rotation opens the next)
    ts: int  # ns since the epoch when the file was opened
    pid: int
    ppid: int
    proc: str  # process name (NVRx node_local_tmp_prefix) when given
    res: dict[str, Any]  # the writer's OTel resource attributes


class Identity(TypedDict, total=False):
    """Rank fields repeated in every record (absent = unknown), so each line stands alone."""

    node: str
    job: str
    rank: int  # workload rank
    lrank: int  # workload local rank
    irank: int  # infra rank
    ilrank: int  # infra local rank


class LogRecord(Identity, total=False):
    """One log call."""

    v: int
    k: str  # "log"
    ts: int  # ns since the epoch at the call
    sev: int  # OTel severity number
    lvl: str  # level name (severity text): DEBUG, INFO, ..., TRACE, SUCCESS
    lg: str  # logger name
    msg: str  # formatted message
    file: str  # base name of the call site's file; optional, readers derive it from path
    path: str  # full path of the call site
    line: int
    fn: str  # function
    pid: int
    tid: int  # thread id
    tn: str  # thread name
    key: str  # nv.nvrx.record.key: "<writer>-<seq hex>", see seq_of
    trace_id: str  # 32 lowercase hex, present inside a valid span
    span_id: str  # 16 lowercase hex
    tf: int  # trace flags
    exc: str  # formatted exception (traceback) text
    exc_type: str
    exc_msg: str
    attrs: dict[str, Any]  # extra attributes (stdlib ``extra``, loguru ``extra``)


class DropRecord(Identity, total=False):
    """Written by a writer once it can again: ``count`` records it could not spool."""

    v: int
    k: str  # "drop"
    ts: int
    pid: int
    key: str
    count: int
    first_ts: int
    last_ts: int
    reason: str  # a semconv.DropReasonValues value


def seq_of(key: str) -> int:
    """The sequence number in a record's ``key`` (``<writer>-<seq>``, ``seq`` in lowercase
    hex): the writer counts every record it emits (log, drop, span), across all its files,
    from 0."""
    return int(key.rpartition("-")[2], 16)


# --- codec ---------------------------------------------------------------------------------


def _default(obj: Any) -> Any:
    """Values orjson does not know become their ``repr`` (attributes never fail a record)."""
    return repr(obj)


def encode(record: dict[str, Any]) -> bytes:
    """One spool line (with its ``\\n``). Never raises for odd values: lone surrogates and
    unknown types are replaced rather than failing the log call."""
    try:
        return orjson.dumps(record, default=_default, option=orjson.OPT_APPEND_NEWLINE)
    except (TypeError, orjson.JSONEncodeError):
        return orjson.dumps(_scrub(record), default=_default, option=orjson.OPT_APPEND_NEWLINE)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {str(_scrub(k)): _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


def decode(line: bytes) -> dict[str, Any]:
    """Decode one spool line (without or with its ``\\n``).

    Invalid UTF-8 bytes and lone surrogate escapes are replaced with U+FFFD instead of
    failing; ``ValueError`` means the line is not a record at all (corrupt).
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = _decode_lenient(line)
    if not isinstance(obj, dict) or obj.get("v") != SCHEMA_VERSION or "k" not in obj:
        raise ValueError("not a spool record of schema version 1")
    return obj


def _decode_lenient(line: bytes) -> Any:
    import json

    text = line.decode("utf-8", "replace")
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            obj = json.loads(text)  # accepts lone surrogate escapes (\\ud800) that orjson refuses
        except ValueError as exc:
            raise ValueError(f"undecodable spool line: {exc}") from None
        obj = _scrub(obj)
    return obj
