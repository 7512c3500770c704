"""NVRx-compatible setup_logger / LogConfig / LogManager and the SpoolHandler."""

from __future__ import annotations

import logging
import logging.config
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx_otel import record as rec
from nvrx_otel.logging import LogConfig, LogManager, SpoolHandler, setup_logger
from nvrx_otel.logging.fastpath import FastLogger
from nvrx_otel.logging.handler import error_count
from tests.conftest import log_records

HERE = Path(__file__).name


def test_spool_mode_writes_structured_records(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    assert log is logging.getLogger("nvrx") and log.propagate is False
    assert type(log) is FastLogger  # the lean path is on as setup_logger leaves it
    line = sys._getframe().f_lineno + 1
    log.info("hello %s", "world", extra={"step": 3})
    (rec,) = log_records(tmp_path)
    assert rec["msg"] == "hello world" and rec["lvl"] == "INFO" and rec["sev"] == 9
    assert rec["lg"] == "nvrx" and rec["path"] == __file__ and rec["line"] == line
    assert rec["fn"] == "test_spool_mode_writes_structured_records"
    assert rec["attrs"] == {"step": 3} and rec["pid"] == os.getpid()
    assert (tmp_path / "nojob").is_dir()


def test_env_var_selects_spool_and_job_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    mgr = LogManager()
    assert mgr.node_local_tmp_logging_enabled
    mgr.logger.warning("w")
    assert [r["msg"] for r in log_records(tmp_path / "777")] == ["w"]


def test_full_path_keeps_caller_when_user_adds_a_filter(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    seen: list[logging.LogRecord] = []

    def keep(record: logging.LogRecord) -> bool:
        seen.append(record)
        return record.getMessage() != "drop me"

    log.addFilter(keep)
    try:
        line = sys._getframe().f_lineno + 1
        log.info("kept")
        log.info("drop me")
    finally:
        log.removeFilter(keep)
    assert [r["msg"] for r in log_records(tmp_path)] == ["kept"]
    assert seen[0].filename == HERE and seen[0].lineno == line
    assert log_records(tmp_path)[0]["line"] == line


def test_logger_adapter_and_stacklevel_report_the_real_caller(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    adapter = logging.LoggerAdapter(log, {})

    def helper() -> None:
        log.info("via helper", stacklevel=2)

    line1 = sys._getframe().f_lineno + 1
    adapter.info("via adapter")
    line2 = sys._getframe().f_lineno + 1
    helper()
    recs = log_records(tmp_path)
    assert [(r["msg"], r["line"]) for r in recs] == [("via adapter", line1), ("via helper", line2)]


def test_exception_is_captured(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    try:
        raise ValueError("bad value")
    except ValueError:
        log.exception("failed")
    (rec,) = log_records(tmp_path)
    assert rec["lvl"] == "ERROR" and rec["exc_type"] == "ValueError"
    assert rec["exc_msg"] == "bad value" and "Traceback" in rec["exc"]


def test_bad_format_arguments_never_raise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    before = error_count()
    log.info("%d", "x")
    log.info("%s %s", "only one")
    log.log("INFO", "level is not an int")  # type: ignore[arg-type]
    assert error_count() == before + 3
    msgs = [r["msg"] for r in log_records(tmp_path)]
    assert len(msgs) == 2 and "format error" in msgs[0]
    assert capsys.readouterr().err.count("bad log format arguments") == 1


def test_debug_env_and_disabled_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.debug("hidden")
    monkeypatch.setenv("NVRX_LOG_DEBUG", "yes")
    log = setup_logger(node_local_tmp_dir=str(tmp_path))  # env changed: reconfigured
    log.debug("shown")
    assert [r["msg"] for r in log_records(tmp_path)] == ["shown"]


def test_repeated_setup_with_other_arguments_reconfigures(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    setup_logger(node_local_tmp_dir=str(a)).info("one")
    setup_logger(node_local_tmp_dir=str(b)).info("two")
    log = setup_logger(node_local_tmp_dir=str(b))
    assert len(log.handlers) == 1
    log.info("three")
    assert [r["msg"] for r in log_records(a)] == ["one"]
    assert [r["msg"] for r in log_records(b)] == ["two", "three"]


def test_symlinked_spool_falls_back_to_stderr_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    log = setup_logger(node_local_tmp_dir=str(tmp_path / "link"))
    log.info("still logged")
    err = capsys.readouterr().err.splitlines()
    assert any("symlink" in e and "logging to stderr" in e for e in err)
    assert any(e.endswith("still logged") and "[INFO]" in e for e in err)
    assert list(real.rglob("*")) == []


def test_uncreatable_spool_falls_back_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    log = setup_logger(node_local_tmp_dir="/proc/nvrx-otel-cannot-exist")
    assert not isinstance(log.handlers[0], SpoolHandler)
    log.warning("fallback works")
    err = capsys.readouterr().err
    assert "cannot create spool directory" in err and "fallback works" in err


def test_stream_mode_line_format(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("NVRX_OTEL_NODE_ID", "node001")
    log = setup_logger()
    line = sys._getframe().f_lineno + 1
    log.info("Training started")
    err = capsys.readouterr().err.strip()
    tail = f"[INFO] [node001] [workload:?(?) infra:3(0)] {HERE}:{line} Training started"
    assert err.endswith(tail), err
    date, clock = err.split(" ")[:2]
    assert len(date) == 10 and len(clock) == 12 and clock[8] == ","


def test_stdout_mode(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NVRX_LOG_TO_STDOUT", "1")
    setup_logger().info("to stdout")
    out = capsys.readouterr()
    assert "to stdout" in out.out and "to stdout" not in out.err


def test_log_file_mode_prefixes_like_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("WORLD_SIZE", "16")
    target = tmp_path / "base.log"
    log = setup_logger(log_file=str(target))
    log.info("line one")
    for h in log.handlers:
        h.flush()
    text = target.read_text()
    assert text.startswith(" 5: ") and text.rstrip().endswith("line one")


def test_spool_handler_from_dictconfig(tmp_path: Path) -> None:
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {
                "spool": {"class": "nvrx_otel.logging.SpoolHandler", "directory": str(tmp_path)}
            },
            "loggers": {"app.train": {"handlers": ["spool"], "level": "INFO", "propagate": False}},
        }
    )
    app = logging.getLogger("app.train")
    try:
        app.info("step %d", 7, extra={"loss": 0.25})
    finally:
        for h in list(app.handlers):
            app.removeHandler(h)
            h.close()
    (rec,) = log_records(tmp_path)
    assert rec["lg"] == "app.train" and rec["msg"] == "step 7" and rec["attrs"] == {"loss": 0.25}
    assert rec["file"] == HERE


def test_spool_handler_filters_run_as_stdlib_runs_them(tmp_path: Path) -> None:
    handler = SpoolHandler(tmp_path)
    handler.addFilter(lambda r: r.getMessage() != "drop me")

    class Redact(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg = str(record.msg).replace("secret", "***")
            return True

    handler.addFilter(Redact())
    app = logging.getLogger("app.filtered")
    app.propagate = False
    app.addHandler(handler)
    try:
        app.warning("keep the secret")
        app.warning("drop me")
    finally:
        app.removeHandler(handler)
        handler.close()
    assert [r["msg"] for r in log_records(tmp_path)] == ["keep the ***"]


def test_log_config_compat(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LogConfig.name == "nvrx"
    assert LogConfig.get_max_file_size() == 10240 * 1024
    assert LogConfig.get_max_file_size(file_size_kb=5) == 5 * 1024
    assert LogConfig.get_max_log_files() == 4
    assert LogConfig.get_process_name("ftlauncher") == "ftlauncher"
    assert LogConfig.get_process_name() == str(os.getpid())
    assert LogConfig.get_workload_rank() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "4")
    assert LogConfig.get_workload_rank() is None  # NVRx semantics: RANK only
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NNODES", "4")
    assert LogConfig.get_infra_rank() == 9
    monkeypatch.setenv("NVRX_OTEL_NODE_ID", "nodeX")
    assert LogConfig.get_log_file() == "nvrx_log_nodeX.log"
    assert LogConfig.get_node_local_tmp_dir("/x") == "/x"
    assert LogConfig.get_log_level() == logging.INFO


def test_malformed_env_never_breaks_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_LOG_MAX_FILE_SIZE_KB", "lots")
    monkeypatch.setenv("RANK", "abc")
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.info("fine")
    assert [r["msg"] for r in log_records(tmp_path)] == ["fine"]


@pytest.mark.parametrize("name", ["RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID"])
def test_rank_beyond_64_bits_never_breaks_setup_nor_drops_records(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Such a rank once reached the spool's packer and raised TypeError there."""
    monkeypatch.setenv(name, str(2**64 + 5))
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.info("fine")
    log.info("%s", "x" * 200_000)  # a record past the file size: the slow path packs too
    first, _big = log_records(tmp_path)
    assert first["msg"] == "fine" and "rank" not in first and "irank" not in first
    err = capsys.readouterr().err
    assert f"{name}='{2**64 + 5}'" in err and "TypeError" not in err


def test_disabled_turns_spooling_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_OTEL_DISABLED", "1")
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    assert not isinstance(log.handlers[0], SpoolHandler)


def test_eight_ranks_two_processes_each_write_every_record(tmp_path: Path) -> None:
    code = (
        "import sys; from nvrx_otel.logging import setup_logger\n"
        "log = setup_logger(node_local_tmp_prefix=sys.argv[1])\n"
        "for i in range(2000): log.info('r%s i%d', sys.argv[1], i)\n"
    )
    procs = []
    for rank in range(8):
        for role in ("worker", "monproc"):
            env = dict(os.environ, RANK=str(rank), NVRX_NODE_LOCAL_TMPDIR=str(tmp_path))
            procs.append(subprocess.Popen([sys.executable, "-c", code, f"{role}{rank}"], env=env))
    assert all(p.wait(timeout=120) == 0 for p in procs)
    recs = log_records(tmp_path)
    assert len(recs) == 16 * 2000
    by_writer: dict[str, list[int]] = {}
    for r in recs:
        by_writer.setdefault(r["key"].split("-")[0], []).append(rec.seq_of(r["key"]))
    assert len(by_writer) == 16
    assert all(seqs == list(range(2000)) for seqs in by_writer.values())


class _Surfacing(Exception):
    """An exception surfacing inside a log call (a signal handler's, as a timeout's)."""


def _raise_once(real: object) -> object:
    calls: list[int] = []

    def wrapped(*args: object, **kwargs: object) -> object:
        if not calls:
            calls.append(1)
            raise _Surfacing
        return real(*args, **kwargs)  # type: ignore[operator]

    return wrapped


def _dropped(directory: Path) -> int:
    from tests.conftest import read_spool

    return sum(r["count"] for r in read_spool(directory) if r["k"] == "drop")


def test_an_exception_inside_the_fast_path_is_counted_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log call returns normally, its record is lost and counted as dropped (a drop
    record says so), and stderr says it is counted, not kept."""
    from nvrx_otel.logging import fastpath

    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    log.info("first")
    monkeypatch.setattr(fastpath, "_time_ns", _raise_once(fastpath._time_ns))
    log.info("lost")
    log.info("after")
    handler = next(h for h in log.handlers if isinstance(h, SpoolHandler))
    handler.writer.close()
    assert [r["msg"] for r in log_records(tmp_path)] == ["first", "after"]
    assert _dropped(tmp_path) == 1
    assert "the record is counted as dropped" in capsys.readouterr().err


def test_an_exception_inside_the_spool_handler_is_counted_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvrx_otel.logging import handler as handler_module

    h = SpoolHandler(tmp_path)
    log = logging.getLogger("test_spool_handler_surfacing")
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        monkeypatch.setattr(
            handler_module, "from_log_record", _raise_once(handler_module.from_log_record)
        )
        log.info("lost", extra={"a": 1})
        log.info("kept", extra={"a": 2})
    finally:
        log.removeHandler(h)
    h.writer.close()
    assert [r["msg"] for r in log_records(tmp_path)] == ["kept"]
    assert _dropped(tmp_path) == 1


def test_root_logger_bridge_spools_library_records(tmp_path: Path) -> None:
    """``setup_root_logger`` (the opentelemetry-instrument path) gives the root logger the
    handler setup_logger uses; a repeated call replaces it, others' handlers stay."""
    from nvrx_otel.logging.setup import setup_root_logger

    root = logging.getLogger()
    foreign = logging.NullHandler()
    level = root.level
    root.addHandler(foreign)
    try:
        setup_root_logger(str(tmp_path))
        setup_root_logger(str(tmp_path))
        ours = [h for h in root.handlers if isinstance(h, SpoolHandler)]
        assert len(ours) == 1 and foreign in root.handlers and root.level == logging.INFO
        logging.getLogger("some.library").info("from a library")
        logging.getLogger("some.library").debug("below the level")
        (r,) = log_records(tmp_path)
        assert (r["lg"], r["msg"]) == ("some.library", "from a library")
    finally:
        for h in [h for h in root.handlers if isinstance(h, SpoolHandler)] + [foreign]:
            root.removeHandler(h)
            h.close()
        root.setLevel(level)
