"""The run file beyond LogFlow: rotation while running (by size and by time, gzip archives,
retention), other processes following a rotation of a shared file, JSON lines and
per-worker files."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from loguru import logger

from nvrx_otel.logging.logflow import configure_logging, get_logger, runfile, shutdown_logging
from nvrx_otel.logging.logflow.configure import current_run_file
from tests.aggregator.spoolkit import wait_for
from tests.logs.logflow.kit import LINE, run_script, script_env

ARCHIVE = re.compile(r"run\.\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}\.\d{6}(?:-\d+)?\.log(?:\.gz)?")


def all_lines(directory: Path, stem: str = "run") -> list[str]:
    """The record messages of a run file and all its archives (gzip ones decompressed)."""
    out = []
    for path in sorted(directory.iterdir()):
        if not path.name.startswith(stem + "."):
            continue
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for line in raw.decode().splitlines():
            m = LINE.match(line)
            if m:
                out.append(m["msg"])
    return out


def test_size_rotation_keeps_every_line_once_across_archives(tmp_path: Path) -> None:
    configure_logging(script_name="run", console_level="CRITICAL", rotation_size="4 KB",
                      retention=1000)  # fmt: skip
    log = get_logger("t")
    for i in range(600):
        log.info("line {:04d} " + "x" * 40, i)
    shutdown_logging()
    logs = tmp_path / "logs"
    archives = [p for p in logs.iterdir() if ARCHIVE.fullmatch(p.name)]
    assert len(archives) >= 10, sorted(p.name for p in logs.iterdir())
    for p in archives:  # none over the size by more than one line
        assert p.stat().st_size <= 4096
    got = [m.split()[1] for m in all_lines(logs)]
    assert sorted(got) == [f"{i:04d}" for i in range(600)]


def test_gzip_archives_replace_the_plain_ones_and_retention_applies(tmp_path: Path) -> None:
    configure_logging(script_name="run", console_level="CRITICAL", rotation_size="2 KB",
                      retention=3, compression="gz")  # fmt: skip
    log = get_logger("t")
    for i in range(300):
        log.info("line {:04d} " + "y" * 40, i)
    logs = tmp_path / "logs"

    def settled() -> bool:
        names = [p.name for p in logs.iterdir() if ARCHIVE.fullmatch(p.name)]
        return len(names) == 3 and all(n.endswith(".gz") for n in names)

    wait_for(settled, timeout=30, what="three gzip archives and no plain one")
    newest = runfile.archives(logs / "run.log")[0]
    text = gzip.decompress(newest.read_bytes()).decode()
    assert "line 0000 " not in text  # the oldest lines went with the purged archives
    assert LINE.match(text.splitlines()[0])


def test_time_rotation_archives_a_file_open_longer_than_the_interval(tmp_path: Path) -> None:
    configure_logging(script_name="run", console_level="CRITICAL", rotation_interval="1 s")
    log = get_logger("t")
    log.info("before")
    logs = tmp_path / "logs"
    state = {"n": 0}

    def rotated() -> bool:
        state["n"] += 1
        log.info("tick {}", state["n"])
        return any(ARCHIVE.fullmatch(p.name) for p in logs.iterdir())

    wait_for(rotated, timeout=20, what="a rotation by time")
    shutdown_logging()
    archive = next(p for p in logs.iterdir() if ARCHIVE.fullmatch(p.name))
    assert "before" in archive.read_text()
    ticks = sorted(int(m.split()[1]) for m in all_lines(logs) if m.startswith("tick"))
    assert ticks == list(range(1, state["n"] + 1))


SHARED = """
import os, sys
from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
configure_logging(script_name="run", console_level="CRITICAL", rotation_size="8 KB",
                  retention=10000, compression="gz", log_dir=sys.argv[1])
log = get_logger("w")
for i in range(1500):
    log.info("r{} line {:05d} " + "z" * 30, os.environ["LOCAL_RANK"], i)
shutdown_logging()
"""


def test_processes_sharing_a_run_file_follow_its_rotation(tmp_path: Path) -> None:
    """Two ranks of one node append to one run file (node-local log_dir with a spool); the
    owner (local rank 0) rotates and compresses it while rank 1 writes: every line of both
    is in the run file or an archive exactly once."""
    script = tmp_path / "shared.py"
    script.write_text(textwrap.dedent(SHARED))
    logs = tmp_path / "logs"
    if not runfile.is_node_local(tmp_path):
        pytest.fail(f"{tmp_path} is not node-local storage here; the test needs it")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(logs)],
            cwd=tmp_path,
            env=script_env(
                tmp_path,
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE="2",
                NVRX_NODE_LOCAL_TMPDIR=str(tmp_path / "spool"),
            ),
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    def compressed() -> bool:
        return not [p for p in logs.iterdir() if p.name.endswith(".log") and p.name != "run.log"]

    wait_for(compressed, timeout=30, what="every archive compressed")
    got = sorted(m.split(" ")[0] + m.split(" ")[2] for m in all_lines(logs))
    want = sorted(f"r{r}{i:05d}" for r in (0, 1) for i in range(1500))
    assert got == want
    assert len([p for p in logs.iterdir() if p.name.endswith(".gz")]) >= 5


def test_json_lines(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    configure_logging(script_name="run", console_level="CRITICAL", file_format="json")
    log = get_logger("trainer").bind(step=7, run={"id": 3})
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        log.warning("loss {}", 0.5)
    try:
        raise ValueError("bad batch")
    except ValueError:
        logger.exception("failed")
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2
    first, second = rows
    ctx = span.get_span_context()
    assert first["level"] == "WARNING" and first["message"] == "loss 0.5"
    assert first["name"] == "trainer" and first["function"] == "test_json_lines"
    assert first["extra"] == {"step": 7, "run": {"id": 3}}
    assert first["trace_id"] == format(ctx.trace_id, "032x")
    assert first["span_id"] == format(ctx.span_id, "016x")
    assert first["pid"] == os.getpid() and first["rank"] is None
    assert first["time"][:4].isdigit() and ("+" in first["time"][19:] or "-" in first["time"][19:])
    assert "ValueError: bad batch" in second["exception"] and "trace_id" not in second


def test_json_lines_keep_a_record_whose_extra_cannot_be_encoded(tmp_path: Path) -> None:
    configure_logging(script_name="run", console_level="CRITICAL", file_format="json")
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    get_logger("t").bind(bad=cyclic, obj=object()).info("still here")
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    (row,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert row["message"] == "still here"


WORKERS = """
import multiprocessing as mp, os, sys
from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging

def spawned():
    from nvrx_otel.logging.logflow import get_logger, shutdown_logging
    get_logger("w").info("spawned {}", os.getpid())
    shutdown_logging()

if __name__ == "__main__":
    configure_logging(script_name="run", console_level="CRITICAL", file_per="worker",
                      enqueue=sys.argv[1] == "1")
    log = get_logger("main")
    log.info("main before")
    pid = os.fork()
    if pid == 0:
        get_logger("w").info("forked {}", os.getpid())
        shutdown_logging()
        os._exit(0)
    os.waitpid(pid, 0)
    p = mp.get_context("spawn").Process(target=spawned)
    p.start(); p.join()
    log.info("main after")
    shutdown_logging()
    print(pid, p.pid)
"""


@pytest.mark.parametrize("enqueue", ["0", "1"])
def test_per_worker_files(tmp_path: Path, enqueue: str) -> None:
    script = tmp_path / "workers.py"  # a file: spawn imports the child's function from it
    script.write_text(textwrap.dedent(WORKERS))
    proc = subprocess.run(
        [sys.executable, str(script), enqueue],
        cwd=tmp_path, env=script_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    forked, spawned = proc.stdout.split()
    logs = tmp_path / "logs"
    main_lines = [LINE.match(x)["msg"] for x in (logs / "run.log").read_text().splitlines()]  # type: ignore[index]
    assert main_lines == ["main before", "main after"]
    fork_file = logs / f"run.worker{forked}.log"
    spawn_file = logs / f"run.worker{spawned}.log"
    assert [m for m in all_lines(logs, f"run.worker{forked}")] == [f"forked {forked}"]
    assert fork_file.exists() and spawn_file.exists()
    assert all_lines(logs, f"run.worker{spawned}") == [f"spawned {spawned}"]


def test_worker_files_of_runs_retention_dropped_are_purged(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    old = logs / "run.worker111.log"
    old.write_text("x\n")
    os.utime(old, (1_000_000, 1_000_000))
    recent = logs / "run.worker222.log"
    recent.write_text("y\n")
    for n, when in enumerate((2_000_000, 3_000_000)):
        a = logs / f"run.2001-01-0{n + 1}_00-00-00.000000.log"
        a.write_text("z\n")
        os.utime(a, (when, when))
    os.utime(recent, (2_500_000, 2_500_000))
    other = logs / "other.worker333.log"
    other.write_text("w\n")
    os.utime(other, (1, 1))
    (logs / "run.log").write_text("previous run\n")
    configure_logging(script_name="run", console_level="CRITICAL", file_per="worker",
                      retention=2)  # fmt: skip
    # the startup rotation made a third archive: retention keeps the newest two, and
    # worker files older than the oldest archive kept belong to dropped runs
    assert not old.exists()
    assert not recent.exists()  # older than the oldest kept (the 3,000,000 one)
    assert other.exists()  # another script's: never touched


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rotation_size", "10 parsecs"),
        ("rotation_size", "0"),
        ("rotation_interval", "-1 h"),
        ("compression", "zip"),
        ("file_format", "xml"),
        ("file_per", "thread"),
    ],
)
def test_bad_values_name_the_key_and_the_file(tmp_path: Path, key: str, value: str) -> None:
    (tmp_path / "logflow.yaml").write_text(f"{key}: {value!r}\n")
    with pytest.raises(ValueError, match=rf"{key}=.*logflow\.yaml"):
        configure_logging()


def test_the_environment_sets_them_too(tmp_path: Path) -> None:
    proc = run_script(
        tmp_path, "envrun",
        """
        from nvrx_otel.logging.logflow import get_logger, shutdown_logging
        get_logger("e").info("as json")
        shutdown_logging()
        """,
        NVRX_OTEL_LOGURU_FILE_FORMAT="json",
        NVRX_OTEL_LOGURU_ROTATION_SIZE="1 MB",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "logs" / "envrun.log").read_text().splitlines()]
    assert row["message"] == "as json"


KILLED = """
import os
from nvrx_otel.logging.logflow import configure_logging, get_logger
configure_logging(script_name="run", console_level="CRITICAL", rotation_size="1 KB",
                  compression="gz", retention=100)
log = get_logger("k")
for i in range(60):
    log.info("line {:03d} " + "k" * 40, i)
os._exit(0)  # no exit handlers: the archives stay plain, as after kill -9
"""


def test_archives_a_killed_process_left_plain_are_compressed_at_the_next_start(
    tmp_path: Path,
) -> None:
    proc = run_script(tmp_path, "killed", KILLED)
    assert proc.returncode == 0, proc.stderr
    logs = tmp_path / "logs"
    plain = [p for p in logs.iterdir() if ARCHIVE.fullmatch(p.name) and p.suffix == ".log"]
    assert plain, "the first run left no plain archive to compress"
    configure_logging(log_dir=logs, script_name="run", console_level="CRITICAL",
                      compression="gz", retention=100)  # fmt: skip
    wait_for(
        lambda: not [p for p in logs.iterdir() if ARCHIVE.fullmatch(p.name) and p.suffix == ".log"],
        timeout=30,
        what="the plain archives compressed",
    )
    got = sorted(int(m.split()[1]) for m in all_lines(logs))
    assert got == list(range(60))
