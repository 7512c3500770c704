"""The schema of spool records: their kinds, their fields and the JSON type of each.

``record`` (the codec) encodes and decodes the lines; this module says what a decoded line
must hold to be a record: :func:`valid` is the type check every reader applies. The full
field list with meanings is in ``docs/spool-format.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypedDict

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
    budget: int  # bytes the writer's files may take together
    max: int  # bytes at which the writer rotates to its next file
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
    key: str  # log.record.uid: "<writer>-<seq hex>", see seq_of
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


class SpanRecord(Identity, total=False):
    """A span's start (``k: "span_start"``) or its end (``k: "span_end"``, all fields)."""

    v: int
    k: str  # "span_start" or "span_end"
    ts: int  # start: the span's start time; end: its end time
    pid: int
    key: str
    trace_id: str
    span_id: str
    parent_id: str | None
    parent_remote: bool  # true when the parent is another process's (TRACEPARENT)
    tf: int
    name: str
    scope: str  # the tracer's name
    scope_v: str | None  # its version
    kind: int  # SpanKind: 0 internal, 1 server, 2 client, 3 producer, 4 consumer
    start: int  # end records: the span's start time
    attrs: dict[str, Any]
    links: list[dict[str, Any]]
    events: list[dict[str, Any]]
    status: dict[str, Any]  # {"code": 0 unset | 1 ok | 2 error, "msg": str}
    dropped: dict[str, int]  # attributes/events/links over the limits


def _keys(*types: Any) -> frozenset[str]:
    return frozenset().union(*(t.__required_keys__ | t.__optional_keys__ for t in types))


FIELDS: Final[dict[str, frozenset[str]]] = {
    KIND_HEADER: _keys(Header),
    KIND_LOG: _keys(LogRecord),
    KIND_DROP: _keys(DropRecord),
    KIND_SPAN_START: _keys(SpanRecord),
    KIND_SPAN_END: _keys(SpanRecord),
}
"""Every field each kind of line may hold (the TypedDicts above, identity included)."""

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
    "parent_remote": bool,
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
    return (_checks.get(keys) or check_of(keys))(record)


def check_of(keys: tuple[str, ...]) -> Callable[[dict[str, Any]], bool]:
    """The check :func:`valid` applies to records with exactly these keys, in this order.

    A hot loop may look it up itself, ``(checks.get(keys) or check_of(keys))(record)``
    with ``checks = record.checks()``, saving the call of :func:`valid` per record."""
    check = _checks.get(keys)
    if check is None:
        if len(_checks) >= _MAX_SHAPES:
            _checks.clear()
        check = _checks[keys] = _compile(keys)
    return check


def checks() -> dict[tuple[str, ...], Callable[[dict[str, Any]], bool]]:
    """The compiled checks by record shape (read only: :func:`check_of` fills it)."""
    return _checks


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
