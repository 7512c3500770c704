"""The wire encoder of log requests against opentelemetry-proto's own messages: for random
records, what ``otlp_wire`` writes parses to the message the proto API builds field by
field (the reference below), and to nothing else."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from nvrx_otel import semconv
from nvrx_otel.aggregator.otlp_wire import LogsEncoder, varint
from nvrx_otel.levels import severity_of_name

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
SHORT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
INT64 = st.integers(-(2**63), 2**63 - 1)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
    | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SHORT, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
HEX16 = st.binary(min_size=16, max_size=16).map(bytes.hex)
HEX8 = st.binary(min_size=8, max_size=8).map(bytes.hex)


@st.composite
def records(draw: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"v": 1, "k": "log", "ts": draw(st.integers(0, 2**64 - 1))}
    r["key"] = draw(st.text(st.sampled_from("0123456789abcdef-"), max_size=200))
    r["msg"] = draw(TEXT)
    r["lg"] = draw(st.sampled_from(["", "nvrx", "torch.distributed", "ü"]))
    for name, strategy in (
        ("sev", st.integers(0, 24)),
        ("lvl", st.sampled_from(["INFO", "WARNING", "SUCCESS", "TRACE", "custom", ""])),
        ("path", SHORT),
        ("fn", SHORT),
        ("tn", SHORT),
        ("tid", st.integers(0, 2**63 - 1)),
        ("line", st.integers(0, 2**31 - 1)),
        ("exc_type", SHORT),
        ("exc_msg", TEXT),
        ("exc", TEXT),
        ("attrs", st.dictionaries(SHORT, JSON, max_size=5)),
    ):
        if draw(st.booleans()):
            r[name] = draw(strategy)
    if draw(st.booleans()):
        r["trace_id"], r["span_id"] = draw(HEX16), draw(HEX8)
        if draw(st.booleans()):
            r["tf"] = draw(st.integers(0, 2**31))
    return r


def _fill(target: AnyValue, value: Any) -> None:
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        if -(2**63) <= value < 2**63:
            target.int_value = value
        else:
            target.string_value = str(value)
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, list):
        for item in value:
            _fill(target.array_value.values.add(), item)
        target.array_value.SetInParent()
    elif isinstance(value, dict):
        for key, item in value.items():
            kv = target.kvlist_value.values.add()
            kv.key = key
            kv.value.SetInParent()  # null: an empty AnyValue, as OTLP has it
            _fill(kv.value, item)
        target.kvlist_value.SetInParent()


def _attr(lr: Any, key: str, value: Any) -> None:
    kv = lr.attributes.add()
    kv.key = key
    kv.value.SetInParent()
    _fill(kv.value, value)


def reference(batch: list[tuple[dict[str, Any], list[dict[str, Any]]]], observed: int) -> Any:
    """The request built with the proto API, one field at a time."""
    req = ExportLogsServiceRequest()
    for resource, recs in batch:
        rl = req.resource_logs.add()
        rl.resource.SetInParent()
        rl.schema_url = semconv.SCHEMA_URL
        for key, value in resource.items():
            kv = rl.resource.attributes.add()
            kv.key = key
            kv.value.SetInParent()
            _fill(kv.value, value)
        scopes: dict[str, Any] = {}
        for r in recs:
            if r.get("lg", "") not in scopes:
                sl = scopes[r.get("lg", "")] = rl.scope_logs.add()
                sl.scope.name = r.get("lg", "")
                sl.scope.SetInParent()
                sl.schema_url = semconv.SCHEMA_URL
            lr = scopes[r.get("lg", "")].log_records.add()
            lr.time_unix_nano = r["ts"]
            lr.observed_time_unix_nano = observed
            lr.severity_number = r.get("sev") or severity_of_name(r.get("lvl"))
            lr.severity_text = r.get("lvl", "")
            lr.body.string_value = r.get("msg", "")
            for key, name in (
                (semconv.CODE_FILE_PATH, "path"),
                (semconv.CODE_FUNCTION_NAME, "fn"),
                (semconv.THREAD_NAME, "tn"),
                (semconv.THREAD_ID, "tid"),
                (semconv.CODE_LINE_NUMBER, "line"),
            ):
                if r.get(name) is not None:
                    _attr(lr, key, r[name])
            _attr(lr, semconv.LOG_RECORD_UID, r.get("key", ""))
            _attr(lr, semconv.RECORD_KEY, r.get("key", ""))  # its alias, for one release
            if "exc_type" in r:
                _attr(lr, semconv.EXCEPTION_TYPE, r["exc_type"])
                _attr(lr, semconv.EXCEPTION_MESSAGE, r.get("exc_msg", ""))
            if "exc" in r:
                _attr(lr, semconv.EXCEPTION_STACKTRACE, r["exc"])
            for key, value in (r.get("attrs") or {}).items():
                _attr(lr, key, value)
            if r.get("trace_id"):
                lr.trace_id = bytes.fromhex(r["trace_id"])
                lr.span_id = bytes.fromhex(r["span_id"])
                lr.flags = r.get("tf", 0) & 0xFF
    return req


@st.composite
def common_records(draw: Any) -> dict[str, Any]:
    """What most records are: every call-site field there, a short message and key, no
    exception, attributes or trace (the encoder's joined-from-cached-parts path), with now and
    then a longer message or key, or an extra field, that take the other."""
    r: dict[str, Any] = {"v": 1, "k": "log", "ts": draw(st.integers(0, 2**64 - 1))}
    r["key"] = draw(st.text(st.sampled_from("0123456789abcdef-"), max_size=130))
    r["msg"] = draw(st.text(max_size=140) | st.sampled_from(["step 1", ""]))
    r["lg"] = draw(st.sampled_from(["", "nvrx", "torch.distributed", "ü"]))
    r["sev"] = draw(st.integers(0, 24))
    r["lvl"] = draw(st.sampled_from(["INFO", "WARNING", ""]))
    r["path"] = draw(st.sampled_from(["/w/train.py", "a" * 400]))
    r["fn"] = draw(st.sampled_from(["step", "<module>"]))
    r["tn"] = "MainThread"
    r["tid"] = draw(st.sampled_from([1, 2**63 - 1]))
    r["line"] = draw(st.integers(0, 300))
    extra = draw(st.sampled_from([None, None, None, "exc", "attrs", "trace_id"]))
    if extra == "exc":
        r["exc"] = "Traceback"
    elif extra == "attrs":
        r["attrs"] = {"a": 1}
    elif extra == "trace_id":
        r["trace_id"], r["span_id"] = "ab" * 16, "cd" * 8
    return r


RESOURCE = st.dictionaries(SHORT, JSON, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(RESOURCE, st.lists(records(), max_size=6)), max_size=3),
       st.integers(0, 2**64 - 1))  # fmt: skip
def test_wire_bytes_parse_to_the_reference_message(batch: Any, observed: int) -> None:
    encoder = LogsEncoder()
    for _ in range(2):  # the second time from the encoder's caches
        wire = encoder.request(batch, observed)
        assert ExportLogsServiceRequest.FromString(wire) == reference(batch, observed)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(RESOURCE, st.lists(common_records(), max_size=12)), max_size=3),
       st.integers(0, 2**64 - 1))  # fmt: skip
def test_common_records_parse_to_the_reference_message(batch: Any, observed: int) -> None:
    encoder = LogsEncoder()
    for _ in range(2):
        wire = encoder.request(batch, observed)
        assert ExportLogsServiceRequest.FromString(wire) == reference(batch, observed)


def test_a_lone_surrogate_is_replaced_not_raised() -> None:
    r = {"v": 1, "k": "log", "ts": 1, "key": "k", "msg": "\ud800 lone", "lg": "nvrx"}
    r |= {"sev": 9, "lvl": "INFO", "path": "p", "fn": "f", "tn": "t", "tid": 1, "line": 2}
    req = ExportLogsServiceRequest.FromString(LogsEncoder().request([({}, [r])], 5))
    assert req.resource_logs[0].scope_logs[0].log_records[0].body.string_value == "? lone"


@given(st.integers(-(2**63), 2**64 - 1))
def test_varint_matches_protobuf(n: int) -> None:
    value = AnyValue(int_value=n) if n < 2**63 else None
    if value is not None:
        assert b"\x18" + varint(n) == value.SerializeToString()
