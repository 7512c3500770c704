"""``module_levels`` as LogFlow defines it: dotted-segment prefixes, longest match, per-sink
levels with global fallback, ``workers_only``; and the gate that keeps disabled calls cheap
without ever hiding a record a handler would take."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from nvrx_otel.logging.logflow import configure_logging, gate, get_logger, ranks
from nvrx_otel.logging.logflow.levels import CONSOLE, FILE, ModuleLevels, Rule
from tests.logs.logflow.kit import messages, run_file_lines


def _table(*rules: Rule, console: str = "INFO", file: str = "DEBUG") -> ModuleLevels:
    return ModuleLevels(console, file, tuple(rules))


def test_prefix_matches_by_dotted_segment() -> None:
    t = _table(Rule("pkg.sub", file="ERROR"), Rule("foo", file="ERROR"))
    assert t.threshold("pkg.sub", FILE) == 40
    assert t.threshold("pkg.sub.mod", FILE) == 40
    assert t.threshold("pkg.subway", FILE) == 10  # not a segment boundary
    assert t.threshold("pkg", FILE) == 10
    assert t.threshold("foobar.baz", FILE) == 10
    assert t.threshold(None, FILE) == 10


def test_longest_prefix_wins_whatever_the_order() -> None:
    rules = [
        Rule("pkg", file="WARNING"),
        Rule("pkg.sub", file="TRACE"),
        Rule("pkg.sub.x", file="ERROR"),
    ]
    for ordering in (rules, rules[::-1]):
        t = _table(*ordering)
        assert t.threshold("pkg.other", FILE) == 30
        assert t.threshold("pkg.sub.mod", FILE) == 5
        assert t.threshold("pkg.sub.x.deep", FILE) == 40


def test_omitted_sink_falls_back_to_its_global_level() -> None:
    t = _table(Rule("pkg", console="ERROR"), Rule("pkg.sub", file="TRACE"), console="SUCCESS")
    assert t.threshold("pkg.a", CONSOLE) == 40
    assert t.threshold("pkg.a", FILE) == 10  # the rule names no file level: global DEBUG
    # the longest match names no console level: the global console level, not pkg's ERROR
    assert t.threshold("pkg.sub.a", CONSOLE) == 25
    assert t.threshold("pkg.sub.a", FILE) == 5


def test_workers_only_rule_exists_only_outside_the_main_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = _table(Rule("data", file="WARNING"), Rule("data.archive", file="ERROR", workers_only=True))
    assert t.threshold("data.archive.x", FILE) == 30  # main process: the next active rule
    t.forget()
    monkeypatch.setattr(ranks, "is_main_process", lambda: False)
    assert t.threshold("data.archive.x", FILE) == 40


def test_floor_ceiling_and_lowers() -> None:
    t = _table(Rule("a", file="TRACE"), Rule("b", console="ERROR"))
    assert (t.floor(FILE), t.ceiling(FILE), t.floor(CONSOLE), t.ceiling(CONSOLE)) == (5, 10, 20, 40)
    assert t.lowers()
    assert not _table(Rule("b", console="ERROR")).lowers()


# --- through configure_logging and loguru ----------------------------------------------------


def _emit_from(module: str, level: str, message: str) -> None:
    """Log as if from module ``module`` (loguru names a record after the caller's globals)."""
    code = compile(f"logger.log({level!r}, {message!r})", f"<{module}>", "exec")
    exec(code, {"__name__": module, "logger": logger})


def test_rules_per_sink_through_loguru(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(
        script_name="run",
        file_level="INFO",
        console_level="INFO",
        module_levels={
            "noisy.lib": {"console": "ERROR", "file": "DEBUG"},  # lowers the file level
            "chatty": {"file": "WARNING"},  # raises it; console falls back to INFO
        },
    )
    assert gate.is_active()
    _emit_from("noisy.lib.io", "DEBUG", "noisy debug")
    _emit_from("noisy.lib.io", "WARNING", "noisy warning")
    _emit_from("noisy.library", "DEBUG", "not noisy.lib")
    _emit_from("plain", "DEBUG", "plain debug")
    _emit_from("plain", "INFO", "plain info")
    _emit_from("chatty.x", "INFO", "chatty info")
    _emit_from("chatty.x", "WARNING", "chatty warning")
    assert messages(tmp_path / "logs" / "run.log") == [
        "noisy debug",
        "noisy warning",
        "plain info",
        "chatty warning",
    ]
    err = capsys.readouterr().err
    assert "noisy warning" not in err and "noisy debug" not in err
    assert "plain info" in err and "chatty info" in err and "chatty warning" in err


def test_gate_never_hides_a_record_another_handler_takes(tmp_path: Path) -> None:
    """A handler added after configure (at DEBUG, no filter) still gets what it asks for."""
    configure_logging(script_name="run", file_level="INFO", module_levels={"x": {"file": "TRACE"}})
    seen: list[str] = []
    log = get_logger("t")
    _emit_from("plain", "DEBUG", "before")
    hid = logger.add(lambda m: seen.append(m.record["message"]), level="DEBUG")
    try:
        _emit_from("plain", "DEBUG", "after")
        log.debug("bound logger too")
        log.trace("below every handler")
    finally:
        logger.remove(hid)
    assert seen == ["after", "bound logger too"]
    assert "after" not in messages(tmp_path / "logs" / "run.log")


def _renamed(name: str) -> Any:
    """A patcher giving the record another module name (how LogFlow's tests pick a name)."""

    def patch(record: Any) -> None:
        record["name"] = name

    return patch


def _emit_renamed(caller: str, name: str, level: str, message: str) -> None:
    """Log from module ``caller`` through ``logger.patch`` renaming the record to ``name``."""
    code = compile(
        f"logger.patch(renamed({name!r})).log({level!r}, {message!r})", f"<{caller}>", "exec"
    )
    exec(code, {"__name__": caller, "logger": logger, "renamed": _renamed})


def test_module_levels_promotes_above_global(tmp_path: Path) -> None:
    """LogFlow's own check, from a ``logflow.yaml``: under a global file level of INFO, a
    rule ``pkg.a: {file: DEBUG}`` lets DEBUG records named ``pkg.a`` (renamed by
    ``logger.patch``) into the run file while ``pkg.b``'s DEBUG stays out."""
    (tmp_path / "logflow.yaml").write_text(
        'file_level: "INFO"\nconsole_level: "INFO"\nmodule_levels:\n  "pkg.a":\n    file: DEBUG\n'
    )
    configure_logging(log_dir=tmp_path / "out", script_name="promote")
    for name, level, message in (
        ("pkg.a", "DEBUG", "a debug"),
        ("pkg.b", "DEBUG", "b debug"),
        ("pkg.b", "INFO", "b info"),
    ):
        logger.patch(_renamed(name)).log(level, message)
    rows = run_file_lines(tmp_path / "out" / "promote.log")
    assert [(r["name"], r["msg"]) for r in rows] == [("pkg.a", "a debug"), ("pkg.b", "b info")]


def test_the_final_name_decides_not_the_calling_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renamed record is judged by its new name on every sink, whatever rule the calling
    module has: out of a raised module into a plain name, out of a lowered one into a plain
    name, into a console-silenced name; through ``patch``, a bound logger's ``patch`` and
    loguru's global patcher."""
    configure_logging(
        script_name="run",
        file_level="INFO",
        console_level="INFO",
        module_levels={
            "chatty": {"file": "ERROR", "console": "ERROR"},  # raises both sinks
            "noisy": {"file": "TRACE"},  # lowers the file sink
            "quiet": {"console": "CRITICAL"},
        },
    )
    _emit_renamed("chatty.x", "plain", "INFO", "chatty renamed plain")  # kept: plain is INFO
    _emit_renamed("noisy.x", "plain", "DEBUG", "noisy renamed plain")  # dropped: plain is INFO
    _emit_renamed("plain", "noisy.y", "TRACE", "plain renamed noisy")  # kept in the file
    _emit_renamed("plain", "quiet", "WARNING", "plain renamed quiet")  # file only
    _emit_renamed("plain", "chatty", "WARNING", "plain renamed chatty")  # dropped
    get_logger("t").patch(_renamed("noisy")).debug("bound then renamed")
    monkeypatch.setattr(logger._core, "patcher", None)  # type: ignore[attr-defined]
    logger.configure(patcher=_renamed("noisy.z"))
    _emit_from("chatty", "DEBUG", "global patcher")  # the caller's ERROR would hide it
    assert messages(tmp_path / "logs" / "run.log") == [
        "chatty renamed plain",
        "plain renamed noisy",
        "plain renamed quiet",
        "bound then renamed",
        "global patcher",
    ]
    assert {r["name"] for r in run_file_lines(tmp_path / "logs" / "run.log")} == {
        "plain", "noisy.y", "quiet", "noisy", "noisy.z",
    }  # fmt: skip
    err = capsys.readouterr().err
    assert "chatty renamed plain" in err
    assert "plain renamed quiet" not in err and "plain renamed chatty" not in err
    assert "plain renamed noisy" not in err and "global patcher" not in err


def test_an_unpatched_call_is_still_gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Renamed records pass the gate; a plain call from a raised module still stops there,
    before loguru builds a record."""
    configure_logging(
        script_name="run", module_levels={"chatty": {"file": "ERROR", "console": "ERROR"}}
    )
    built: list[str] = []
    real = gate.GatedLogger._log

    def spy(self: Any, level: Any, from_decorator: bool, options: Any, message: str,
            args: Any, kwargs: Any) -> None:  # fmt: skip
        built.append(message)
        real(self, level, from_decorator, options, message, args, kwargs)

    monkeypatch.setattr(gate.GatedLogger, "_log", spy)
    _emit_from("chatty.x", "INFO", "gated")
    _emit_renamed("chatty.x", "plain", "INFO", "renamed")
    assert built == ["renamed"]
    assert messages(tmp_path / "logs" / "run.log") == ["renamed"]


def test_gated_methods_keep_the_call_site(tmp_path: Path) -> None:
    configure_logging(script_name="run", module_levels={"x": {"file": "TRACE"}})
    log = get_logger("t")
    assert type(log) is gate.GatedLogger and type(log.opt(depth=0)) is gate.GatedLogger
    line = _line() + 1
    log.info("one")
    log.opt(exception=False).log("SUCCESS", "two")

    def helper() -> None:
        log.opt(depth=1).warning("three")

    helper()
    try:
        raise KeyError("k")
    except KeyError:
        log.exception("four")
    rows = run_file_lines(tmp_path / "logs" / "run.log")
    assert [(r["msg"], r["level"]) for r in rows] == [
        ("one", "INFO"), ("two", "SUCCESS"), ("three", "WARNING"), ("four", "ERROR"),
    ]  # fmt: skip
    assert [int(r["line"]) for r in rows[:3]] == [line, line + 1, line + 6]
    assert {r["name"] for r in rows} == {__name__}
    assert "KeyError: 'k'" in (tmp_path / "logs" / "run.log").read_text()


def test_no_rules_no_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configure_logging(script_name="run")
    assert not gate.is_active()

    def consulted(*args: object) -> bool:
        raise AssertionError("the gate was consulted without module rules")

    monkeypatch.setattr(gate, "_open", consulted)
    get_logger("t").info("no gate")
    assert messages(tmp_path / "logs" / "run.log") == ["no gate"]


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def _worker(queue: Any) -> None:
    _emit_from("data.archive", "INFO", f"worker info {os.getpid()}")
    _emit_from("data.archive", "ERROR", "worker error")
    queue.put(ranks.is_main_process())


def test_workers_only_in_a_real_worker(tmp_path: Path) -> None:
    """A forked multiprocessing worker applies the workers_only rule; the parent does not."""
    configure_logging(
        script_name="run",
        module_levels={"data.archive": {"file": "ERROR", "workers_only": True}},
    )
    _emit_from("data.archive", "INFO", "main info")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    proc = ctx.Process(target=_worker, args=(queue,))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    assert queue.get() is False
    _emit_from("data.archive", "INFO", "main info again")
    assert messages(tmp_path / "logs" / "run.log") == [
        "main info",
        "worker error",
        "main info again",
    ]


def test_every_level_method_through_the_gate(tmp_path: Path) -> None:
    configure_logging(script_name="run", file_level="DEBUG", module_levels={"x": {"file": "TRACE"}})
    log = get_logger("t")
    log.trace("trace: below this module's threshold")
    for method in ("debug", "info", "success", "warning", "error", "critical"):
        getattr(log, method)(method)
    log.log(25, "by number")
    log.log("INFO", "by name")
    with pytest.raises(ValueError, match="Level 'NOPE' does not exist"):
        log.log("NOPE", "unknown level: loguru's own error")
    assert messages(tmp_path / "logs" / "run.log") == [
        "debug", "info", "success", "warning", "error", "critical", "by name",
    ]  # fmt: skip
    assert (
        "| Level 25 | tests.logs.logflow.test_levels:"
        in (tmp_path / "logs" / "run.log").read_text()
    )


@pytest.mark.parametrize(
    ("environ", "rank"),
    [
        ({}, None),
        ({"RANK": "4", "SLURM_PROCID": "9"}, 4),
        ({"RANK": "x", "SLURM_PROCID": "9"}, 9),  # not a number: skipped, as LogFlow does
        ({"LOCAL_RANK": "1", "NODE_RANK": "2", "GROUP_RANK": "5", "LOCAL_WORLD_SIZE": "4"}, 9),
        ({"LOCAL_RANK": "1", "GROUP_RANK": "2", "LOCAL_WORLD_SIZE": "4"}, 9),
        ({"LOCAL_RANK": "3"}, 3),
        ({"LOCAL_RANK": "1", "NODE_RANK": "n"}, None),
        ({"GROUP_RANK": "2"}, None),  # no LOCAL_RANK: no rank
    ],
)
def test_logflow_rank_resolution(environ: dict[str, str], rank: int | None) -> None:
    assert ranks.logflow_rank(environ) == rank
    assert ranks.rank_tag(rank) == ("" if not rank else f"[rank {rank}] | ")
