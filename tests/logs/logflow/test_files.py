"""The run file: LogFlow's line format, startup archives that never collide, retention that
touches only this script's archives, per-rank files over shared storage, the pivot after an
implicit configure, and loguru's ``diagnose`` off by default."""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

import pytest

from nvrx_otel.logging.logflow import configure_logging, get_logger, runfile, shutdown_logging
from nvrx_otel.logging.logflow.configure import current_run_file
from tests.logs.logflow.kit import LINE, messages, run_file_lines

ARCHIVE = re.compile(r"^run\.\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}\.\d{6}(-\d+)?\.log$")


def _old_run(path: Path, text: str, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_line_format_is_logflows(tmp_path: Path) -> None:
    configure_logging(log_dir="out", script_name="train")
    log = get_logger(__name__)
    line = sys._getframe().f_lineno + 1
    log.success("saved {}", "ckpt")
    text = (tmp_path / "out" / "train.log").read_text()
    m = LINE.match(text.splitlines()[0])
    assert m is not None, text
    assert (m["level"], m["tag"], m["name"], m["fn"], m["line"], m["msg"]) == (
        "SUCCESS", None, __name__, "test_line_format_is_logflows", str(line), "saved ckpt",
    )  # fmt: skip
    assert text.splitlines()[0][23:37] == " | SUCCESS  | "  # level padded to 8 like LogFlow


def test_rank_tag_above_rank_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    configure_logging(script_name="train")
    get_logger().info("hi")
    (row,) = run_file_lines(tmp_path / "logs" / "train.log")
    assert row["tag"] == "[rank 3] | "


def test_script_name_discovery(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "__file__", "/x/y/train_gpt.py", raising=False)
    assert runfile.discover_script_name() == "train_gpt"
    monkeypatch.setattr(main, "__file__", "/x/mypkg/__main__.py")
    assert runfile.discover_script_name() == "mypkg"
    monkeypatch.delattr(main, "__file__")
    monkeypatch.setattr(sys, "argv", ["/bin/tool.py", "--x"])
    assert runfile.discover_script_name() == "tool"
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert runfile.discover_script_name() == "app"


def test_startup_rotation_archives_and_starts_fresh(tmp_path: Path) -> None:
    _old_run(tmp_path / "logs" / "run.log", "previous run\n", 1_700_000_000.25)
    configure_logging(script_name="run")
    get_logger().info("this run")
    assert messages(tmp_path / "logs" / "run.log") == ["this run"]
    (archive,) = runfile.archives(tmp_path / "logs" / "run.log")
    assert ARCHIVE.match(archive.name) and archive.read_text() == "previous run\n"
    assert ".250000" in archive.name  # sub-second precision from the mtime


def test_archive_names_never_collide(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    made = []
    for i in range(3):
        _old_run(path, f"run {i}\n", 1_700_000_000.5)  # same mtime, to the microsecond
        made.append(runfile.archive(path))
    names = [p.name for p in made if p is not None]
    assert len(set(names)) == 3 and all(ARCHIVE.match(n) for n in names)
    assert sorted(p.read_text() for p in made if p is not None) == ["run 0\n", "run 1\n", "run 2\n"]
    assert runfile.archive(path) is None  # nothing left to archive


def test_retention_deletes_only_this_scripts_archives(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for i in range(4):  # LogFlow-named archives of this script count too
        _old_run(logs / f"run.2020-01-0{i + 1}_00-00-00.log", "old\n", 1_600_000_000 + i)
    keep_others = [
        logs / "other.2024-01-01_00-00-00.log",  # another script's archive
        logs / "other.log",
        logs / "run.rank1.2024-01-01_00-00-00.log",  # another stem
        logs / "runner.2024-01-01_00-00-00.log",
        logs / "notes.txt",
    ]
    for p in keep_others:
        _old_run(p, "x\n", 1_500_000_000)
    _old_run(logs / "run.log", "last run\n", 1_700_000_000)
    configure_logging(script_name="run", retention=2)
    kept = runfile.archives(logs / "run.log")
    assert [p.read_text() for p in kept] == ["last run\n", "old\n"]
    assert kept[1].name == "run.2020-01-04_00-00-00.log"  # the newest of the old ones
    assert all(p.exists() for p in keep_others)


def test_retention_zero_keeps_no_archive(tmp_path: Path) -> None:
    _old_run(tmp_path / "logs" / "run.log", "last run\n", 1_700_000_000)
    configure_logging(script_name="run", retention=0)
    assert runfile.archives(tmp_path / "logs" / "run.log") == []


def test_rotation_off_from_a_file_appends(tmp_path: Path) -> None:
    (tmp_path / "logflow.yaml").write_text("rotation_on_startup: false\nscript_name: run\n")
    _old_run(tmp_path / "logs" / "run.log", "previous run\n", 1_700_000_000)
    configure_logging()
    get_logger().info("this run")
    assert (tmp_path / "logs" / "run.log").read_text().startswith("previous run\n")
    assert runfile.archives(tmp_path / "logs" / "run.log") == []


def test_implicit_then_explicit_configure_takes_effect_and_pivots(tmp_path: Path) -> None:
    log = get_logger("early")  # e.g. at import time: configured with the defaults
    log.info("early line")
    interim = current_run_file()
    assert interim is not None and interim.parent == tmp_path / "logs"
    configure_logging(log_dir="final", script_name="job", file_level="INFO")
    log.debug("dropped: file_level is INFO now")
    log.info("late line")
    assert messages(tmp_path / "final" / "job.log") == ["early line", "late line"]
    assert not interim.exists()  # its content moved into the new run file


def test_explicit_then_different_explicit_warns_and_force_applies(tmp_path: Path) -> None:
    configure_logging(script_name="run", file_level="INFO")
    configure_logging(script_name="run", file_level="INFO")  # same settings: quietly nothing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        configure_logging(script_name="run", file_level="TRACE")
    (w,) = [w for w in caught if "already called" in str(w.message)]
    assert "file_level='TRACE' (in effect: 'INFO')" in str(w.message)
    assert "force=True" in str(w.message)
    get_logger().debug("not yet")
    configure_logging(script_name="run", file_level="TRACE", force=True)
    get_logger().debug("now")
    assert messages(tmp_path / "logs" / "run.log") == ["now"]


def test_per_rank_run_file_with_a_spool_on_shared_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setattr(runfile, "is_node_local", lambda path: False)
    configure_logging(script_name="train")
    get_logger().info("r5")
    assert current_run_file() == tmp_path / "logs" / "train.rank5.log"
    assert messages(tmp_path / "logs" / "train.rank5.log") == ["r5"]


def test_single_run_file_when_log_dir_is_node_local_or_without_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    configure_logging(script_name="train")  # no spool: LogFlow's one file
    assert current_run_file() == tmp_path / "logs" / "train.log"
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    monkeypatch.setattr(runfile, "is_node_local", lambda path: True)
    configure_logging(script_name="train", force=True)
    assert current_run_file() == tmp_path / "logs" / "train.log"


def test_node_local_detection_from_the_mount_table(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "overlay / overlay rw 0 0\n"
        "tmpfs /tmp tmpfs rw 0 0\n"
        "srv:/home /home nfs4 rw 0 0\n"
        "lustre@o2ib:/scratch /scratch lustre rw 0 0\n"
        "gcs /mnt/my\\040bucket fuse.gcsfuse rw 0 0\n"
        "/dev/sdb1 /data fuseblk rw 0 0\n"
    )
    m = str(mounts)
    assert runfile.is_node_local(Path("/tmp/x"), m) and runfile.is_node_local(Path("/opt"), m)
    assert not runfile.is_node_local(Path("/home/u/logs"), m)
    assert not runfile.is_node_local(Path("/scratch/job"), m)
    assert not runfile.is_node_local(Path("/mnt/my bucket/x"), m)
    assert runfile.is_node_local(Path("/data/logs"), m)
    assert not runfile.is_node_local(Path("/x"), str(tmp_path / "missing"))  # unknown: shared


def test_diagnose_is_off_by_default(tmp_path: Path) -> None:
    configure_logging(script_name="run")

    def fail(password: str) -> None:
        raise RuntimeError("login failed")

    secret = "-".join(["hunter2", "secret"])  # not in the source the traceback quotes
    try:
        fail(secret)
    except RuntimeError:
        get_logger().exception("oops")
    shutdown_logging()
    text = (tmp_path / "logs" / "run.log").read_text()
    assert "RuntimeError: login failed" in text and "hunter2-secret" not in text


def test_diagnose_can_be_turned_on(tmp_path: Path) -> None:
    configure_logging(script_name="run", diagnose=True)
    secret = "-".join(["hunter2", "secret"])
    try:
        raise RuntimeError(len(secret))
    except RuntimeError:
        get_logger().exception("oops")
    assert "hunter2-secret" in (tmp_path / "logs" / "run.log").read_text()


def test_unusable_log_dir_warns_and_keeps_console_and_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.logs.logflow.kit import spool_logs

    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    (tmp_path / "blocker").write_text("a file where the log directory should be\n")
    for enqueue in (False, True):
        configure_logging(log_dir="blocker/logs", script_name="run", enqueue=enqueue, force=True)
        get_logger("t").info(f"still logged {enqueue}")
        assert current_run_file() is None
    err = capsys.readouterr().err
    assert "cannot create the log directory" in err and "still logged False" in err
    assert [r["msg"] for r in spool_logs(tmp_path / "spool")] == [
        "still logged False",
        "still logged True",
    ]


def test_unwritable_run_file_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "logs" / "run.log").mkdir(parents=True)  # a directory where the file should be
    for enqueue in (False, True):
        configure_logging(script_name="run", enqueue=enqueue, force=True)
        assert current_run_file() is None
    assert "cannot open the run file" in capsys.readouterr().err
    assert (tmp_path / "logs" / "run.log").is_dir()  # never archived: not a regular file
