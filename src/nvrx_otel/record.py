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
from collections.abc import Callable
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
    failing; ``ValueError`` means the line is not a record at all, or one whose fields do
    not have their types (:func:`valid`): corrupt.
    """
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = _decode_lenient(line)
    if not isinstance(obj, dict) or obj.get("v") != SCHEMA_VERSION or "k" not in obj:
        raise ValueError("not a spool record of schema version 1")
    if not valid(obj):
        raise ValueError("a field of the record has the wrong type")
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


# --- validation ----------------------------------------------------------------------------

_INT: Final = int
_STR: Final = str
_FIELD_TYPES: Final[dict[str, type]] = {
    # every kind (the identity fields, ``pid`` and ``file`` are only shown, as they are)
    "ts": _INT,
    "key": _STR,
    "trace_id": _STR,
    "span_id": _STR,
    "tf": _INT,
    "attrs": dict,
    # log
    "sev": _INT,
    "lvl": _STR,
    "lg": _STR,
    "msg": _STR,
    "path": _STR,
    "line": _INT,
    "fn": _STR,
    "tid": _INT,
    "tn": _STR,
    "exc": _STR,
    "exc_type": _STR,
    "exc_msg": _STR,
    # drop
    "count": _INT,
    "first_ts": _INT,
    "last_ts": _INT,
    "reason": _STR,
    # header
    "w": _STR,
    "f": _INT,
    "res": dict,
    "budget": _INT,
    "max": _INT,
    # spans
    "parent_id": _STR,
    "name": _STR,
    "scope": _STR,
    "scope_v": _STR,
    "kind": _INT,
    "start": _INT,
    "links": list,
    "events": list,
    "status": dict,
    "dropped": dict,
}
"""The JSON type of every field a sink interprets (``bool`` is not an ``int`` here)."""
_NULLABLE: Final = frozenset({"path", "fn", "tn", "tid", "line", "parent_id", "scope_v", "attrs"})
"""Fields that may be ``null`` (stdlib leaves a record's thread or function unset)."""

_REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    KIND_LOG: ("ts",),
    KIND_DROP: ("ts",),
    KIND_HEADER: (),
    KIND_SPAN_START: ("ts", "trace_id", "span_id"),
    KIND_SPAN_END: ("ts", "trace_id", "span_id"),
}

_MAX_SHAPES: Final = 4096
_checks: dict[tuple[str, ...], Callable[[dict[str, Any]], bool]] = {}
"""A compiled check per record shape (its keys in order): a call site's records share one."""


def valid(record: dict[str, Any]) -> bool:
    """True when every field a reader interprets has its documented type, the fields its
    kind needs are there, and ids are hex of the right length.

    A record failing this is corrupt (counted and reported like undecodable bytes) rather
    than reaching a sink that would fail on it. Cheap: records of one shape (the same keys
    in the same order, as a call site writes them) share one check compiled to a single
    expression of type tests.
    """
    keys = tuple(record)
    check = _checks.get(keys)
    if check is None:
        if len(_checks) >= _MAX_SHAPES:
            _checks.clear()
        check = _checks[keys] = _compile(keys)
    return check(record)


def _compile(keys: tuple[str, ...]) -> Callable[[dict[str, Any]], bool]:
    """The check of records with exactly these keys. Only field names of
    ``_FIELD_TYPES`` (constants of this module) go into the generated source."""
    present = set(keys)
    kinds = frozenset(
        kind for kind, needed in _REQUIRED.items() if all(f in present for f in needed)
    )
    terms = ["d.get('k') in kinds"]
    for name, want in _FIELD_TYPES.items():
        if name not in present:
            continue
        test = f"type(d[{name!r}]) is {want.__name__}"
        if name in _NULLABLE:
            test = f"({test} or d[{name!r}] is None)"
        terms.append(test)
    if "trace_id" in present or "parent_id" in present:
        terms.append("ids_ok(d)")
    # names bound as defaults: locals are faster to load than globals
    names = "type=type, int=int, str=str, dict=dict, list=list, kinds=kinds, ids_ok=ids_ok"
    source = f"lambda d, {names}: " + " and ".join(terms)  # each term is a bool
    scope = {"kinds": kinds, "ids_ok": _ids_ok}
    check: Callable[[dict[str, Any]], bool] = eval(source, scope)
    return check


def _hex(value: Any, length: int) -> bool:
    if not isinstance(value, str) or len(value) != length:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True


def _ids_ok(record: dict[str, Any]) -> bool:
    if "trace_id" in record and not (
        _hex(record["trace_id"], 32) and _hex(record.get("span_id"), 16)
    ):
        return False
    parent = record.get("parent_id")
    if parent and not _hex(parent, 16):
        return False
    if record.get("k") in (KIND_SPAN_START, KIND_SPAN_END):
        return _span_parts_ok(record)
    return True


def _span_parts_ok(record: dict[str, Any]) -> bool:
    """Events, links, status and dropped counts of a span record have their types."""
    for event in record.get("events") or ():
        if not isinstance(event, dict) or type(event.get("ts", 0)) is not int:
            return False
        if not isinstance(event.get("name", ""), str):
            return False
        if not isinstance(event.get("attrs") or {}, dict):
            return False
    for link in record.get("links") or ():
        if not isinstance(link, dict):
            return False
        if not (_hex(link.get("trace_id"), 32) and _hex(link.get("span_id"), 16)):
            return False
        if not isinstance(link.get("attrs") or {}, dict):
            return False
    status = record.get("status") or {}
    if type(status.get("code", 0)) is not int or not isinstance(status.get("msg", ""), str):
        return False
    dropped = record.get("dropped") or {}
    if any(type(v) is not int for v in dropped.values()):
        return False
    kind = record.get("kind", 0)
    return bool(0 <= kind <= 4 and 0 <= record.get("tf", 1) <= 0xFF)
