"""The one record type that flows from a rank to the collector, and its codec.

This module is the only code that knows the spool's bytes: every writer path (the stdlib
fast path and handler, the loguru bridge, spans, drop records, file headers) builds its
lines with the encoders below, and every reader decodes them with :func:`decode` and
:func:`valid`. The speed tricks (line templates filled by one ``%``, identity fields
spliced on as bytes) are encoders here too, so the bytes are defined in one place.

A spool file is JSON lines (UTF-8, one record per ``\\n``-terminated line). Its first line
is a header unique to its writer; every further line is one record whose ``k`` says what
it is. Every front end (stdlib, loguru, the span exporter) produces these; every sink (node
log, OTLP) consumes them. The full field list is in ``docs/spool-format.md``.

Records stay plain dicts (what ``orjson.loads`` returns) so the aggregator pays nothing to
convert them; the TypedDicts of ``recordschema`` say which keys exist and
:func:`valid` checks their types.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from nvrx_otel.levels import SEVERITY_BY_LEVEL as SEVERITY_BY_LEVEL
from nvrx_otel.levels import severity_of as severity_of
from nvrx_otel.recordschema import FIELDS as FIELDS
from nvrx_otel.recordschema import KIND_DROP as KIND_DROP
from nvrx_otel.recordschema import KIND_HEADER as KIND_HEADER
from nvrx_otel.recordschema import KIND_LOG as KIND_LOG
from nvrx_otel.recordschema import KIND_SPAN_END as KIND_SPAN_END
from nvrx_otel.recordschema import KIND_SPAN_START as KIND_SPAN_START
from nvrx_otel.recordschema import SCHEMA_VERSION as SCHEMA_VERSION
from nvrx_otel.recordschema import DropRecord as DropRecord
from nvrx_otel.recordschema import Header as Header
from nvrx_otel.recordschema import Identity as Identity
from nvrx_otel.recordschema import LogRecord as LogRecord
from nvrx_otel.recordschema import SpanRecord as SpanRecord
from nvrx_otel.recordschema import check_of as check_of
from nvrx_otel.recordschema import checks as checks
from nvrx_otel.recordschema import valid as valid


def record_key(writer_id: str, seq: int) -> str:
    """A record's ``key``: ``<writer>-<seq>`` with ``seq`` in lowercase hex."""
    return f"{writer_id}-{seq:x}"


def seq_of(key: str) -> int:
    """The sequence number in a record's ``key`` (``<writer>-<seq>``, ``seq`` in lowercase
    hex): the writer counts every record it emits (log, drop, span), across all its files,
    from 0."""
    return int(key.rpartition("-")[2], 16)


# --- codec ---------------------------------------------------------------------------------


def _default(obj: Any) -> Any:
    """Values orjson does not know become their ``repr`` (attributes never fail a record);
    one whose ``repr`` raises becomes :func:`unrepresentable`. Only the full path
    (:func:`encode`) pays for this: the fast encoders give orjson no ``default``."""
    try:
        text = repr(obj)
    except Exception:
        return unrepresentable(obj)
    return _SURROGATE.sub("\ufffd", text)


def unrepresentable(obj: object) -> str:
    """The placeholder for a value that cannot be printed: ``<unrepresentable: Type>``."""
    return f"<unrepresentable: {type(obj).__qualname__}>"


def encode(record: dict[str, Any]) -> bytes:
    """One spool line (with its ``\\n``). Never raises for odd values: lone surrogates,
    unknown types, values whose ``repr`` raises, cycles and nesting deeper than orjson
    takes are replaced rather than failing the log call."""
    try:
        return orjson.dumps(record, default=_default, option=orjson.OPT_APPEND_NEWLINE)
    except (TypeError, orjson.JSONEncodeError):
        return orjson.dumps(_scrub(record), default=_default, option=orjson.OPT_APPEND_NEWLINE)


_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH: Final = 200
"""Containers nested deeper than this are cut (orjson refuses more than 254 levels)."""


def _scrub(value: Any, depth: int = 0, path: frozenset[int] = frozenset()) -> Any:
    """``value`` with what orjson refuses replaced: lone surrogates, keys that are not
    strings, integers over 64 bits, cycles and deep nesting (``path``: the containers
    holding ``value``)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, (dict, list, tuple)):
        if depth >= _MAX_DEPTH or id(value) in path:
            return unrepresentable(value)
        inner = path | {id(value)}
        if isinstance(value, dict):
            return {_key(k): _scrub(v, depth + 1, inner) for k, v in value.items()}
        return [_scrub(v, depth + 1, inner) for v in value]
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


def _key(key: Any) -> str:
    """A mapping key as the JSON object key it becomes."""
    try:
        text = key if key.__class__ is str else str(key)
    except Exception:
        return unrepresentable(key)
    return _SURROGATE.sub("\ufffd", text)


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


# --- encoders of the writer paths ------------------------------------------------------------

json_value: Final = orjson.dumps
"""A value's JSON bytes, as a template's ``%b`` takes them (``msg``); raises on lone
surrogates and odd types, where a caller takes the full path (:func:`encode`)."""

_LOG_TEMPLATE: Final = b'"ts":%%d,"msg":%%b,%%b%%b"key":"%b-%%x"'


def encoded_fields(fields: dict[str, Any]) -> bytes:
    """``fields`` as the inside of a JSON object followed by a comma (never raises)."""
    return encode(fields)[1:-2] + b","


def identity_suffix(fields: dict[str, Any]) -> bytes:
    """The identity fields (and ``pid``) as the end of a line, spliced onto a record's
    encoding in place of its closing ``}``: ``,"node":…}\n``."""
    return b"," + encode(fields)[1:]


def log_head(sev: int, lvl: str, lg: str) -> bytes:
    """The constant start of a log line of one logger and level:
    ``{"v":1,"k":"log","sev":…,"lvl":…,"lg":…,``."""
    fields = {"v": SCHEMA_VERSION, "k": KIND_LOG, "sev": sev, "lvl": lvl, "lg": lg}
    return b"{" + encoded_fields(fields)


def log_template(
    head: bytes, writer_id: str, suffix: bytes, *, trace: bool, attrs: bool = False
) -> bytes:
    """A plain log line as a ``%`` template of one logger, level and writer: ``head``
    (:func:`log_head`), then ``ts`` (int), ``msg`` (its JSON bytes), two runs of fields
    ending in a comma (:func:`encoded_fields`: call site, thread), the writer's ``seq``
    (int, written in hex), with ``trace`` the ids (``_tracectx.encoded_ids`` bytes, empty
    without a span), with ``attrs`` the attributes (``,"attrs":{…}`` bytes, or empty),
    then the identity ``suffix``."""
    return (
        head.replace(b"%", b"%%")
        + _LOG_TEMPLATE % writer_id.encode()
        + (b"%b" if trace else b"")
        + (b"%b" if attrs else b"")
        + suffix.replace(b"%", b"%%")
    )


def spliced_line(record: dict[str, Any], suffix: bytes) -> bytes:
    """``record`` (``v`` and ``key`` set) with the writer's identity ``suffix`` spliced on
    as bytes instead of merged into the dict: one line."""
    try:
        body = orjson.dumps(record)
    except (TypeError, orjson.JSONEncodeError):
        body = encode(record)[:-1]
    return body[:-1] + suffix


def headed_line(head: bytes, fields: dict[str, Any], suffix: bytes) -> bytes:
    """A log line from its cached ``head`` (:func:`log_head`), the rest of its ``fields``
    and the identity ``suffix``."""
    try:
        body = orjson.dumps(fields)
    except (TypeError, orjson.JSONEncodeError):
        body = encode(fields)[:-1]
    return head + body[1:-1] + suffix


def header_line(
    *,
    writer_id: str,
    index: int,
    ts: int,
    pid: int,
    ppid: int,
    proc: str,
    budget: int,
    max_file_size: int,
    resource: dict[str, Any],
) -> bytes:
    """The first line of a writer's file ``index`` (``res`` last: the collector's filelog
    mode takes it with a pattern anchored at the end of the line)."""
    header = {
        "v": SCHEMA_VERSION,
        "k": KIND_HEADER,
        "w": writer_id,
        "f": index,
        "ts": ts,
        "pid": pid,
        "ppid": ppid,
        "proc": proc,
        "budget": budget,
        "max": max_file_size,
        "res": resource,
    }
    return encode(header)


def drop_line(
    *,
    writer_id: str,
    seq: int,
    ts: int,
    count: int,
    first_ts: int,
    last_ts: int,
    reason: str,
    identity: dict[str, Any],
) -> bytes:
    """A ``drop`` record: ``count`` records of the writer between ``first_ts`` and
    ``last_ts`` could not be spooled, for ``reason``."""
    drop = {
        "v": SCHEMA_VERSION,
        "k": KIND_DROP,
        "ts": ts,
        "count": count,
        "first_ts": first_ts,
        "last_ts": last_ts,
        "reason": reason,
        "key": record_key(writer_id, seq),
    }
    drop.update(identity)
    return encode(drop)
