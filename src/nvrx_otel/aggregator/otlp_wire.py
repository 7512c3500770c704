"""Spool records → serialized OTLP log requests, written as protobuf wire bytes directly.

Filling opentelemetry-proto messages and serializing them costs about 5 us per log record
(upb); most of a record's bytes repeat from record to record (its call site, its level,
its code line) and can be serialized once. This encoder writes the wire format of
``ExportLogsServiceRequest`` itself (field numbers from opentelemetry-proto's
``logs.proto``/``common.proto``), caching every repeated part; ``benchmarks/bench_otlp.py``
measures it against the message route, and ``tests/aggregator/test_otlp_wire.py`` checks
that what it writes parses to the same message the message route builds.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

from nvrx_otel import semconv
from nvrx_otel.levels import severity_of_name

Record = dict[str, Any]
Batch = Sequence[tuple[Mapping[str, Any], list[Record]]]
"""Records grouped by their writer's resource attributes (the header's ``res``)."""

_fromhex = bytes.fromhex
_double = struct.Struct("<d").pack
_fixed32 = struct.Struct("<I").pack
_times = struct.Struct("<BQBQ").pack  # time_unix_nano (1), observed_time_unix_nano (11)
_stamp = struct.Struct("<BQ").pack  # one of them: its tag, its value

# Tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
_T_ANY_STRING: Final = 0x0A
_T_ANY_BOOL: Final = 0x10
_T_ANY_INT: Final = 0x18
_T_ANY_DOUBLE: Final = 0x21
_T_ANY_ARRAY: Final = 0x2A
_T_ANY_KVLIST: Final = 0x32
_T_KV_KEY: Final = 0x0A
_T_KV_VALUE: Final = 0x12
_T_LR_TIME: Final = 0x09
_T_LR_OBSERVED: Final = 0x59
_T_LR_SEVERITY: Final = 0x10
_T_LR_SEVERITY_TEXT: Final = 0x1A
_T_LR_BODY: Final = 0x2A
_T_LR_ATTR: Final = 0x32
_T_LR_FLAGS: Final = 0x45
_T_LR_TRACE: Final = 0x4A
_T_LR_SPAN: Final = 0x52
_T_SCOPE: Final = 0x0A  # ScopeLogs.scope, ResourceLogs.resource, Request.resource_logs
_T_ITEMS: Final = 0x12  # ScopeLogs.log_records, ResourceLogs.scope_logs
_T_NAME: Final = 0x0A  # InstrumentationScope.name
_T_RES_ATTR: Final = 0x0A  # Resource.attributes
_T_REQ: Final = 0x0A  # ExportLogsServiceRequest.resource_logs
_T_SCHEMA_URL: Final = 0x1A  # ScopeLogs.schema_url, ResourceLogs.schema_url

_SMALL: Final = [bytes((n,)) for n in range(128)]
_TRUE: Final = bytes((_T_ANY_BOOL, 1))
_FALSE: Final = bytes((_T_ANY_BOOL, 0))
_TRACE_ID: Final = bytes((_T_LR_TRACE, 16))  # tag and length of the 16-byte trace id
_SPAN_ID: Final = bytes((_T_LR_SPAN, 8))
_FLAGS: Final = bytes((_T_LR_FLAGS,))

# The common record's parts (``LogsEncoder.request``): its call site's fields, the heads of
# a body shorter than _SHORT_BODY bytes (tag and length of the AnyValue, then of its string)
# and the head of a ScopeLogs.log_records item of each length below len(_ITEM_HEADS).
_SITE: Final = operator.itemgetter("lg", "path", "fn", "line", "tid", "tn", "sev", "lvl")
_SHORT_BODY: Final = 126
_BODY_HEADS: Final = [bytes((_T_LR_BODY, m + 2, _T_ANY_STRING, m)) for m in range(_SHORT_BODY)]


def varint(n: int) -> bytes:
    """An unsigned varint (negative int64s as their 64-bit two's complement)."""
    if 0 <= n < 128:
        return _SMALL[n]
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 127:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    n = len(payload)
    return (_SMALL[tag] + _SMALL[n] if n < 128 else _SMALL[tag] + varint(n)) + payload


_ITEM_HEADS: Final = [bytes((_T_ITEMS,)) + varint(n) for n in range(2048)]


def any_value(value: Any) -> bytes:
    """An AnyValue's bytes for a JSON value (str, bool, int, float, list, dict, None)."""
    if isinstance(value, str):
        return field(_T_ANY_STRING, value.encode("utf-8", "replace"))
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return _SMALL[_T_ANY_INT] + varint(value)
        return field(_T_ANY_STRING, str(value).encode())
    if isinstance(value, float):
        return _SMALL[_T_ANY_DOUBLE] + _double(value)
    if isinstance(value, (list, tuple)):
        return field(_T_ANY_ARRAY, b"".join(field(0x0A, any_value(v)) for v in value))
    if isinstance(value, dict):
        return field(
            _T_ANY_KVLIST, b"".join(field(0x0A, key_value(str(k), v)) for k, v in value.items())
        )
    if value is None:
        return b""
    return field(_T_ANY_STRING, str(value).encode("utf-8", "replace"))


def key_value(key: str, value: Any) -> bytes:
    return field(_T_KV_KEY, key.encode("utf-8", "replace")) + field(_T_KV_VALUE, any_value(value))


def attributes(tag: int, attrs: Mapping[str, Any]) -> bytes:
    return b"".join(field(tag, key_value(k, v)) for k, v in attrs.items())


class LogsEncoder:
    """Caches what a record shares with others from its call site (logger, code location,
    thread, level): those bytes are serialized once. One encoder per sink."""

    MAX_CACHED: Final = 65536

    def __init__(self) -> None:
        self._shared: dict[tuple[Any, ...], bytes] = {}
        # The record's key goes out twice: as log.record.uid and, for one release, as its
        # deprecated alias nv.nvrx.record.key (semconv.RECORD_KEY).
        self._key_names = (
            field(_T_KV_KEY, semconv.LOG_RECORD_UID.encode()),
            field(_T_KV_KEY, semconv.RECORD_KEY.encode()),
        )
        longest = max(map(len, self._key_names))
        # each key attribute up to the key's bytes, per key length (one-byte lengths)
        self._key_heads = [
            [
                bytes((_T_LR_ATTR, len(name) + 4 + k)) + name + bytes((_T_KV_VALUE, k + 2, 0x0A, k))
                for k in range(124 - longest)
            ]
            for name in self._key_names
        ]
        # an item's bytes besides its call site's, its message's and its key's (twice)
        self._fixed = 9 + 4 + sum(len(heads[0]) for heads in self._key_heads)
        self._schema = field(_T_SCHEMA_URL, semconv.SCHEMA_URL.encode())

    def _serialize_shared(self, r: Record) -> bytes:
        """Severity, severity text and the call site's attributes (code line included)."""
        out = b""
        sev = r.get("sev")
        lvl = r.get("lvl")
        number = sev or severity_of_name(lvl)
        if number:
            out += _SMALL[_T_LR_SEVERITY] + varint(number)
        if lvl:
            out += field(_T_LR_SEVERITY_TEXT, str(lvl).encode("utf-8", "replace"))
        attrs: dict[str, Any] = {}  # the logger name is the scope's name, not an attribute
        for key, name in (
            (semconv.CODE_FILE_PATH, "path"),
            (semconv.CODE_FUNCTION_NAME, "fn"),
            (semconv.THREAD_NAME, "tn"),
            (semconv.THREAD_ID, "tid"),
            (semconv.CODE_LINE_NUMBER, "line"),
        ):
            value = r.get(name)
            if value is not None:
                attrs[key] = value
        return out + attributes(_T_LR_ATTR, attrs)

    def record(self, r: Record, observed_ns: int) -> bytes:
        """One LogRecord as a ScopeLogs.log_records field (tag, length, bytes)."""
        get = r.get
        shared_key = (
            get("lg"), get("path"), get("fn"), get("line"), get("tid"), get("tn"),
            get("sev"), get("lvl"),
        )  # fmt: skip
        shared = self._shared.get(shared_key)
        if shared is None:
            shared = self._serialize_shared(r)
            if len(self._shared) < self.MAX_CACHED:
                self._shared[shared_key] = shared
        msg = get("msg", "").encode("utf-8", "replace")
        key = get("key", "").encode("utf-8", "replace")
        m = len(msg)
        k = len(key)
        if m < 126 and k < 124:
            # body: AnyValue{string_value}; the key: KeyValue{key, AnyValue{string_value}}
            # literals, the hot path: _T_LR_BODY, _T_ANY_STRING; _T_KV_VALUE, _T_ANY_STRING
            body = b"\x2a" + _SMALL[m + 2] + b"\x0a" + _SMALL[m] + msg
            kv = b"\x12" + _SMALL[k + 2] + b"\x0a" + _SMALL[k] + key
        else:
            body = field(_T_LR_BODY, field(_T_ANY_STRING, msg))
            kv = field(_T_KV_VALUE, field(_T_ANY_STRING, key))
        uid, alias = self._key_names
        parts = [
            _times(0x09, r["ts"], 0x59, observed_ns),
            shared,
            body,
            field(_T_LR_ATTR, uid + kv),
            field(_T_LR_ATTR, alias + kv),
        ]
        if "exc_type" in r:
            parts.append(field(_T_LR_ATTR, key_value(semconv.EXCEPTION_TYPE, r["exc_type"])))
            parts.append(
                field(_T_LR_ATTR, key_value(semconv.EXCEPTION_MESSAGE, get("exc_msg", "")))
            )
        if "exc" in r:
            parts.append(field(_T_LR_ATTR, key_value(semconv.EXCEPTION_STACKTRACE, r["exc"])))
        extra = get("attrs")
        if extra:
            parts.append(attributes(_T_LR_ATTR, extra))
        trace_id = get("trace_id")
        if trace_id:
            parts.append(_TRACE_ID + _fromhex(trace_id) + _SPAN_ID + _fromhex(r["span_id"]))
            parts.append(_FLAGS + _fixed32(get("tf", 0) & 0xFF))
        return field(_T_ITEMS, b"".join(parts))

    def request(self, batch: Batch, observed_ns: int) -> bytes:
        """A serialized ExportLogsServiceRequest: a ResourceLogs per writer, a ScopeLogs per
        logger name (as ``otlp_encode.encode_logs`` builds it).

        The common record (a short message and key, its call site's fields all present,
        nothing else to add) is written in one join from cached parts: its call site's bytes
        with this request's observed time, the tag-and-length heads of its body and key from
        tables. Any other record takes :meth:`record`; both write the same message."""
        out: list[bytes] = []
        record = self.record
        shared_of = self._shared.get
        site_of = _SITE
        observed = _stamp(_T_LR_OBSERVED, observed_ns)
        stamp = _stamp
        fixed = self._fixed
        bodies = _BODY_HEADS
        keys, aliases = self._key_heads
        heads = _ITEM_HEADS
        schema = self._schema
        join = b"".join
        for resource, records in batch:
            scopes: dict[str, list[bytes]] = {}
            sites: dict[tuple[Any, ...], tuple[list[bytes], bytes]] = {}
            for r in records:
                try:
                    site = site_of(r)
                    msg = r["msg"].encode()
                    key = r["key"].encode()
                    plain = not ("exc_type" in r or "exc" in r or "attrs" in r or "trace_id" in r)
                except Exception:  # a field missing, not text, or not encodable strictly
                    plain = False
                if plain and len(msg) < _SHORT_BODY and len(key) < len(keys):
                    at = sites.get(site)
                    if at is None:
                        shared = shared_of(site)
                        if shared is None:
                            shared = self._serialize_shared(r)
                            if len(self._shared) < self.MAX_CACHED:
                                self._shared[site] = shared
                        logger = site[0]
                        items = scopes.get(logger)
                        if items is None:
                            items = scopes[logger] = []
                        at = sites[site] = (items, observed + shared)
                    items, prefix = at
                    size = fixed + len(prefix) + len(msg) + 2 * len(key)
                    if size < len(heads):
                        items.append(
                            join(
                                (
                                    heads[size],
                                    stamp(_T_LR_TIME, r["ts"]),
                                    prefix,
                                    bodies[len(msg)],
                                    msg,
                                    keys[len(key)],
                                    key,
                                    aliases[len(key)],
                                    key,
                                )
                            )
                        )
                        continue
                logger = r.get("lg", "")
                items = scopes.get(logger)
                if items is None:
                    items = scopes[logger] = []
                items.append(record(r, observed_ns))
            # the heads with lengths summed, so that the request's bytes are copied once
            body = [field(_T_SCOPE, attributes(_T_RES_ATTR, resource))]
            size = len(body[0])
            for logger, items in scopes.items():
                scope = field(_T_SCOPE, field(_T_NAME, logger.encode("utf-8", "replace")))
                n = len(scope) + sum(map(len, items)) + len(schema)
                head = _SMALL[_T_ITEMS] + varint(n)
                body += (head, scope)
                body += items
                body.append(schema)  # ScopeLogs.schema_url
                size += len(head) + n
            body.append(schema)  # ResourceLogs.schema_url
            size += len(schema)
            out += (_SMALL[_T_REQ], varint(size))
            out += body
        return b"".join(out)
