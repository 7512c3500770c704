"""The console, in real processes: only the main process of rank 0 (or of a job without
ranks) prints, through Rich on stderr, in LogFlow's console format; colour only on a
terminal and never with NO_COLOR; ranks as LogFlow resolves them."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.logs.logflow.kit import CONSOLE, run_file_lines, run_script, script_env

SCRIPT = """
import multiprocessing
from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging

def child():
    get_logger("c").warning("from a forked child")

if __name__ == "__main__":
    configure_logging(script_name="job")
    log = get_logger(__name__)
    log.info("hello [bold]not markup[/bold]")
    log.debug("debug: file only")
    p = multiprocessing.get_context("fork").Process(target=child)
    p.start()
    p.join()
    shutdown_logging()
"""

ANSI = "\x1b["


def _run(tmp: Path, **env: str) -> tuple[str, list[dict[str, str]]]:
    proc = run_script(tmp, "job", SCRIPT, **env)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr, run_file_lines(tmp / "logs" / "job.log")


def test_job_without_ranks_prints_on_stderr(tmp_path: Path) -> None:
    err, rows = _run(tmp_path)
    lines = err.splitlines()
    assert len(lines) == 1, err  # the forked child and DEBUG stay off the console
    m = CONSOLE.match(lines[0])
    assert m is not None, lines[0]
    assert (m["level"], m["name"], m["fn"], m["msg"]) == (
        "INFO", "__main__", "<module>", "hello [bold]not markup[/bold]",
    )  # fmt: skip
    assert ANSI not in err  # not a terminal: no colour
    assert [r["msg"] for r in rows] == [
        "hello [bold]not markup[/bold]",
        "debug: file only",
        "from a forked child",
    ]
    assert all(r["tag"] is None for r in rows)


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({"RANK": "1"}, 1),
        ({"SLURM_PROCID": "3"}, 3),
        ({"GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 3),
    ],
)
def test_other_ranks_are_silent_and_tagged(tmp_path: Path, env: dict[str, str], rank: int) -> None:
    err, rows = _run(tmp_path, **env)
    assert "hello" not in err and "child" not in err, err
    assert len(rows) == 3 and {r["tag"] for r in rows} == {f"[rank {rank}] | "}


def test_rank_zero_prints(tmp_path: Path) -> None:
    err, rows = _run(tmp_path, RANK="0", LOCAL_RANK="0")
    assert err.count("hello") == 1 and len(rows) == 3
    assert all(r["tag"] is None for r in rows)  # LogFlow tags ranks above 0 only


def _on_terminal(tmp: Path, **env: str) -> str:
    """Run the script with stderr on a pseudo-terminal; what it printed there."""
    (tmp / "job.py").write_text(SCRIPT)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, str(tmp / "job.py")],
            cwd=tmp,
            env=script_env(tmp, TERM="xterm-256color", **env),
            stdout=subprocess.DEVNULL,
            stderr=slave,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_colour_on_a_terminal(tmp_path: Path) -> None:
    out = _on_terminal(tmp_path)
    assert "not markup" in out and ANSI in out


def test_no_colour_with_no_color(tmp_path: Path) -> None:
    out = _on_terminal(tmp_path, NO_COLOR="1")
    assert "hello [bold]not markup[/bold]" in out and ANSI not in out
