"""The lean path of the ``"nvrx"`` logger: the line it builds from cached pieces must say
what a fresh record would say, whatever the caches hold (call sites, threads, spans,
the writer after a fork)."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from nvrx_otel import record as rec
from nvrx_otel.identity import set_identity
from nvrx_otel.logging import fastpath, setup_logger
from nvrx_otel.logging.fastpath import FastLogger
from tests.conftest import log_records


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
    for i in range(fastpath._MAX_SITES + 50):  # past the cache's bound: it starts over
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
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.info("parent before")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            log.info("child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    log.info("parent after")
    by_msg = {r["msg"]: r for r in log_records(tmp_path)}
    child, parent = by_msg["child"], by_msg["parent before"]
    assert child["pid"] == pid and parent["pid"] == os.getpid()
    assert child["key"].split("-")[0] != parent["key"].split("-")[0]
    assert rec.seq_of(child["key"]) == 0  # the child's writer counts from 0
    assert by_msg["parent after"]["key"].split("-")[0] == parent["key"].split("-")[0]


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
