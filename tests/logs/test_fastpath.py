"""The lean path of the ``"nvrx"`` logger: the line it builds from cached pieces must say
what a fresh record would say, whatever the caches hold (call sites, threads, spans,
the writer after a fork)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from nvrx_otel import record as rec
from nvrx_otel.identity import set_identity
from nvrx_otel.logging import fastpath, leanpath, setup_logger
from nvrx_otel.logging.fastpath import FastLogger
from tests.conftest import log_records
from tests.logs.forked import check_child_writes_its_own_keys


def _ids(span: object) -> str:
    return format(span.get_span_context().span_id, "016x")  # type: ignore[attr-defined]


def test_records_follow_the_current_span_in_and_out(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    tracer = TracerProvider().get_tracer("t")
    log.info("before")
    with tracer.start_as_current_span("a") as a:
        log.info("in a")
        with tracer.start_as_current_span("b") as b:
            log.info("in b")
        log.info("in a again")
    log.info("after")
    got = [(r["msg"], r.get("span_id"), r.get("trace_id")) for r in log_records(tmp_path)]
    trace_id = format(a.get_span_context().trace_id, "032x")
    assert got == [
        ("before", None, None),
        ("in a", _ids(a), trace_id),
        ("in b", _ids(b), trace_id),
        ("in a again", _ids(a), trace_id),
        ("after", None, None),
    ]
    flags = int(a.get_span_context().trace_flags)
    assert all(r["tf"] == flags for r in log_records(tmp_path) if "span_id" in r)


def test_each_thread_logs_its_own_span_and_name(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    tracer = TracerProvider().get_tracer("t")
    spans: dict[str, str] = {}
    barrier = threading.Barrier(4)

    def work() -> None:
        name = threading.current_thread().name
        with tracer.start_as_current_span(name) as span:
            spans[name] = _ids(span)
            for i in range(200):
                if i == 0:
                    barrier.wait()  # all four inside their spans, logging at once
                log.info("step %d", i)

    threads = [threading.Thread(target=work, name=f"worker-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = log_records(tmp_path)
    assert len(records) == 800
    for r in records:
        assert r["span_id"] == spans[r["tn"]]
    assert {r["tn"] for r in records} == set(spans)
    assert len({r["tid"] for r in records}) >= 1


def test_a_thread_started_after_another_ended_has_its_own_name(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    for i in range(20):  # thread idents are reused once a thread is gone
        t = threading.Thread(target=lambda: log.info("hi"), name=f"t{i}")
        t.start()
        t.join()
    assert [r["tn"] for r in log_records(tmp_path)] == [f"t{i}" for i in range(20)]


def test_call_sites_are_exact_for_many_and_short_lived_code(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    expected = []
    for i in range(leanpath._MAX_SITES + 50):  # past the cache's bound: it starts over
        src = "\n" * (i % 7) + f"def f{i}(log):\n    log.warning('x')\n"
        namespace: dict[str, object] = {}
        exec(compile(src, f"<gen{i}>", "exec"), namespace)  # a new code object each time
        namespace[f"f{i}"](log)  # type: ignore[operator]
        expected.append((f"<gen{i}>", i % 7 + 2, f"f{i}"))
        del namespace  # freed: its id may come back for another code object
    line = sys._getframe().f_lineno + 2
    for _ in range(2):
        log.info("one"), log.info("two")  # type: ignore[func-returns-value]  # two sites, one line
    got = [(r["path"], r["line"], r["fn"]) for r in log_records(tmp_path)]
    here = (__file__, line, "test_call_sites_are_exact_for_many_and_short_lived_code")
    assert got == [*expected, *[here] * 4]


def test_alternating_callers_keep_their_own_sites(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))

    def first() -> int:
        log.info("first")
        return sys._getframe().f_lineno - 1

    def second() -> int:
        log.info("second")
        return sys._getframe().f_lineno - 1

    order = [first, second, second, first] * 3
    expected = [(f.__name__, f()) for f in order]
    assert [(r["fn"], r["line"]) for r in log_records(tmp_path)] == expected


def test_fork_child_writes_its_own_keys_and_pid(tmp_path: Path) -> None:
    check_child_writes_its_own_keys(setup_logger(node_local_tmp_dir=str(tmp_path)), tmp_path)


def test_percent_signs_in_the_identity_are_kept(tmp_path: Path) -> None:
    set_identity(job_id="j%d%%s", node_id="n%b")
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.info("m %s", "x")
    (r,) = log_records(tmp_path)
    assert (r["job"], r["node"], r["msg"]) == ("j%d%%s", "n%b", "m x")


def test_mapping_argument_and_odd_messages(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.info("%(a)s and %(b)d", {"a": "x", "b": 2})
    log.log(logging.INFO, "%(a)s", {"a": "y"})
    log.info("lone \udce9 surrogate")
    log.info(["not", "a", "str"])
    assert [r["msg"] for r in log_records(tmp_path)] == [
        "x and 2",
        "y",
        "lone \ufffd surrogate",
        "['not', 'a', 'str']",
    ]


def test_lean_path_off_and_on_again_keeps_the_class(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    fastpath.uninstall(log)
    assert type(log) is FastLogger  # never switched back: attribute reads stay fast
    log.info("full path")  # no lean path: stdlib's path runs the handler
    log = setup_logger(node_local_tmp_dir=str(tmp_path), force_reset=True)
    log.info("lean again")
    assert [r["msg"] for r in log_records(tmp_path)] == ["full path", "lean again"]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.msgs: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.msgs.append(record.getMessage())


def _drop(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("drop")


Change = Callable[[logging.Logger, logging.Handler, _Collect], object]


def _set_filters(target: logging.Filterer, value: list[Any]) -> None:
    target.filters[:] = value


# (what the change is, apply, undo, what the full path must then show)
CHANGES: list[tuple[str, Change, Change, str]] = [
    (
        "addFilter",
        lambda lg, h, o: lg.addFilter(_drop),
        lambda lg, h, o: lg.removeFilter(_drop),
        "filtered",
    ),
    (
        "filters.append",
        lambda lg, h, o: lg.filters.append(_drop),
        lambda lg, h, o: lg.filters.pop(),
        "filtered",
    ),
    (
        "filters[:] =",
        lambda lg, h, o: _set_filters(lg, [_drop]),
        lambda lg, h, o: _set_filters(lg, []),
        "filtered",
    ),
    (
        "handler addFilter",
        lambda lg, h, o: h.addFilter(_drop),
        lambda lg, h, o: h.removeFilter(_drop),
        "filtered",
    ),
    (
        "handler filters.insert",
        lambda lg, h, o: h.filters.insert(0, _drop),
        lambda lg, h, o: h.filters.clear(),
        "filtered",
    ),
    (
        "handler setLevel",
        lambda lg, h, o: h.setLevel(logging.WARNING),
        lambda lg, h, o: h.setLevel(0),
        "filtered",
    ),
    (
        "handler.level =",
        lambda lg, h, o: setattr(h, "level", logging.WARNING),
        lambda lg, h, o: setattr(h, "level", 0),
        "filtered",
    ),
    ("addHandler", lambda lg, h, o: lg.addHandler(o), lambda lg, h, o: lg.removeHandler(o), "both"),
    (
        "handlers.append",
        lambda lg, h, o: lg.handlers.append(o),
        lambda lg, h, o: lg.handlers.remove(o),
        "both",
    ),
    (
        "handlers += ",
        lambda lg, h, o: lg.handlers.__iadd__([o]),
        lambda lg, h, o: lg.handlers.__delitem__(1),
        "both",
    ),
    (
        "propagate",
        lambda lg, h, o: setattr(lg, "propagate", True),
        lambda lg, h, o: setattr(lg, "propagate", False),
        "root",
    ),
]


@pytest.mark.parametrize(("what", "apply", "undo", "shows"), CHANGES, ids=[c[0] for c in CHANGES])
def test_every_change_to_handlers_filters_or_propagation_takes_effect_at_once(
    tmp_path: Path, what: str, apply: Change, undo: Change, shows: str
) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path), force_reset=True)
    (handler,) = log.handlers
    other = _Collect()
    root = logging.getLogger()
    root.addHandler(other)  # sees only what propagates (the other handler is also added to log)
    made: list[logging.LogRecord] = []
    factory = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append(factory(*args, **kwargs))
        return made[-1]

    logging.setLogRecordFactory(counting)
    try:
        log.info("lean 1")
        apply(log, handler, other)
        log.info("drop me")
        log.warning("full")
        undo(log, handler, other)
        log.info("lean 2")
    finally:
        logging.setLogRecordFactory(factory)
        root.removeHandler(other)
    # LogRecords are made on the full path only; a handler level keeps higher levels lean.
    full = ["drop me"] if "level" in what.lower() else ["drop me", "full"]
    assert [r.getMessage() for r in made] == full
    spooled = [r["msg"] for r in log_records(tmp_path)]
    if shows == "filtered":
        assert spooled == ["lean 1", "full", "lean 2"]
    else:
        assert spooled == ["lean 1", "drop me", "full", "lean 2"]
        assert other.msgs == ["drop me", "full"]


def test_a_plain_list_put_in_place_keeps_the_full_path_until_setup(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path), force_reset=True)
    (handler,) = log.handlers
    log.filters = [_drop]  # a plain list: its later changes could not be seen
    log.info("drop me")
    log.filters = []
    handler.filters = []
    handler.filters.append(_drop)
    log.info("drop me too")
    log.info("kept")
    assert log._nvrx_fast.lean_from > logging.CRITICAL  # type: ignore[attr-defined]
    log = setup_logger(node_local_tmp_dir=str(tmp_path), force_reset=True)
    assert log._nvrx_fast.lean_from == 0  # type: ignore[attr-defined]
    log.info("lean again")
    assert [r["msg"] for r in log_records(tmp_path)] == ["kept", "lean again"]


def test_a_logger_made_before_setup_gets_the_lean_path_and_watched_lists(tmp_path: Path) -> None:
    script = f"""
import logging
early = logging.getLogger("nvrx")  # made by the application before setup_logger ran
from nvrx_otel.logging import setup_logger
log = setup_logger(node_local_tmp_dir={str(tmp_path)!r})
assert log is early and type(log).__name__ == "FastLogger", type(log)
assert log._nvrx_fast.lean_from == 0
log.info("lean")
log.addFilter(lambda r: r.getMessage() != "drop me")
log.info("drop me")
log.info("full")
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert [r["msg"] for r in log_records(tmp_path)] == ["lean", "full"]


def test_lean_keys_count_in_hex_like_the_writer(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path), force_reset=True)
    (handler,) = log.handlers
    writer = handler.writer  # type: ignore[attr-defined]
    for i in range(11):
        log.info("n %d", i)
    logging.getLogger("nvrx").log(logging.INFO, "general path")  # the writer's own key
    keys = [r["key"] for r in log_records(tmp_path)]
    first = rec.seq_of(keys[0])
    assert keys == [f"{writer.writer_id}-{first + i:x}" for i in range(12)]
