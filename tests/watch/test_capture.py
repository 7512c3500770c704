"""Output capture with real processes: what fd 1 and 2 receive becomes records, and the
original destination still receives every byte."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.aggregator.spoolkit import process_env, wait_for
from tests.conftest import log_records, spawn
from tests.watch.watchkit import run, start, watcher_pids

WRITERS = """\
log = setup_logger()
log.info("structured")
print("python print", flush=True)
libc = ctypes.CDLL(None)
libc.printf(b"native printf %d\\n", 42)
libc.fflush(None)
os.write(2, b"raw write(2)\\n")
os.system("echo child of sh; echo child stderr >&2")
sys.stderr.write("no newline at the end")
"""


def test_native_python_and_child_output_become_records(tmp_path: Path) -> None:
    r = run(tmp_path, WRITERS)
    assert r.proc.returncode == 0
    r.watcher_done()
    assert r.captured("stdout") == ["python print", "native printf 42", "child of sh"]
    assert r.captured("stderr") == ["raw write(2)", "child stderr", "no newline at the end"]
    for rec in r.records():
        if rec.get("attrs", {}).get("log.iostream"):
            assert rec["pid"] == r.proc.pid and rec["rank"] == 0
            assert rec["lvl"] == rec["attrs"]["log.iostream"].upper()
    ending = r.ending()
    assert ending["attrs"] == {"process.exit.code": 0, "nv.nvrx.process.outcome": "exit"}


def test_the_destination_gets_every_byte_as_without_capture(tmp_path: Path) -> None:
    on = run(tmp_path / "on", WRITERS)
    off = run(tmp_path / "off", WRITERS, NVRX_OTEL_CAPTURE_OUTPUT="off")
    on.watcher_done()
    assert on.out.read_bytes() == off.out.read_bytes() != b""
    assert on.err.read_bytes() == off.err.read_bytes() != b""
    assert not off.captured("stdout") and not off.captured("stderr")


def test_a_progress_bar_is_one_record_of_its_final_state(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        """\
        setup_logger()
        for i in range(10_000):
            sys.stderr.write(f"\\rstep {i + 1}/10000")
        sys.stderr.write("\\n")
    """,
    )
    r.watcher_done()
    assert r.captured("stderr") == ["step 10000/10000"]
    assert r.err.read_bytes().count(b"\r") == 10_000


def test_a_ten_megabyte_line_is_cut_with_the_caps_marker(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        """\
        setup_logger()
        os.write(1, b"x" * (10 << 20) + b"\\nafter\\n")
    """,
        NVRX_OTEL_MAX_RECORD_KB="64",
    )
    r.watcher_done()
    assert r.out.stat().st_size == (10 << 20) + 7
    first, after = r.captured("stdout")
    assert first.startswith("x" * 1000) and first.endswith("bytes]") and len(first) <= 64 << 10
    assert after == "after"


def test_kill_9_mid_line_keeps_what_was_written(tmp_path: Path) -> None:
    r = start(
        tmp_path,
        """\
        setup_logger()
        os.write(2, b"a whole line\\nhalf a li")
        print("ready", flush=True)
        time.sleep(60)
    """,
    )
    wait_for(lambda: b"ready" in r.out.read_bytes(), 30, "the rank to start")
    r.proc.kill()
    r.wait()
    ending = r.ending()
    assert r.captured("stderr") == ["a whole line", "half a li"]
    assert ending["attrs"]["nv.nvrx.process.outcome"] == "signal"
    assert ending["attrs"]["nv.nvrx.process.signal"] == "SIGKILL"


def test_a_terminal_is_left_alone_unless_forced(tmp_path: Path) -> None:
    """Under a pseudo-terminal ``isatty()`` stays true and nothing is captured (auto);
    ``on`` captures it, and then the descriptor is a pipe."""
    script = tmp_path / "tty.py"
    script.write_text(
        "import os, sys\nfrom nvrx_otel.logging import setup_logger\nsetup_logger()\n"
        "os.write(1, f'tty={os.isatty(1)},{sys.stdout.isatty()}\\n'.encode())\n"
    )
    for mode, tty in (("auto", True), ("on", False)):
        main, sub = pty.openpty()
        env = process_env(tmp_path / mode, "testnode", RANK="0", NVRX_OTEL_CAPTURE_OUTPUT=mode,
                          NVRX_OTEL_CAPTURE_STACKS="on")  # fmt: skip
        proc = spawn([sys.executable, str(script)], stdout=sub, stderr=sub, env=env)
        os.close(sub)
        got = b""
        while b"\n" not in got:
            try:
                chunk = os.read(main, 1024)
            except OSError:  # the terminal closed
                break
            if not chunk:
                break
            got += chunk
        assert proc.wait(60) == 0
        os.close(main)
        assert got.strip() == f"tty={tty},{tty}".encode(), mode
        spool = tmp_path / mode / "spool"

        def captured(spool: Path = spool) -> tuple[list[str]] | None:
            records = log_records(spool)
            if not any("nv.nvrx.process.outcome" in r.get("attrs", {}) for r in records):
                return None  # the watcher has not finished
            return ([r["msg"] for r in records if "log.iostream" in r.get("attrs", {})],)

        (lines,) = wait_for(captured, 30, "the watcher's records")
        assert lines == ([] if tty else [f"tty={tty},{tty}"]), mode


def test_a_dead_watcher_never_blocks_the_rank(tmp_path: Path) -> None:
    """The watcher is SIGKILLed; the rank then writes 8 MB (8 pipe buffers) and exits."""
    r = start(
        tmp_path,
        """\
        setup_logger()
        print("ready", flush=True)
        while not os.path.exists("go"):
            time.sleep(0.01)
        time.sleep(0.5)
        for _ in range(8 * 1024):
            os.write(1, b"y" * 1023 + b"\\n")
        print("done", flush=True)
    """,
    )
    wait_for(lambda: b"ready" in r.out.read_bytes(), 30, "the rank to start")
    watcher = _watcher_of(r.proc.pid)
    os.kill(watcher, signal.SIGKILL)
    (tmp_path / "go").touch()
    assert r.wait(60) == 0
    out = r.out.read_bytes()
    assert out.endswith(b"done\n") and out.count(b"y" * 1023 + b"\n") == 8 * 1024
    assert b"watcher" in r.err.read_bytes()  # said once why capture stopped


def _watcher_of(pid: int) -> int:
    def find() -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    env = Path(f"/proc/{entry}/environ").read_bytes()
                except OSError:
                    continue
                if f'"pid":{pid},'.encode() in env:
                    return int(entry)
        return None

    found: int = wait_for(find, 30, "the watcher")
    return found


def test_a_hundred_ranks_writing_stderr_at_full_speed_block_nothing_and_balance(
    tmp_path: Path,
) -> None:
    """100 ranks, each 2,000 lines to stderr as fast as it can: every rank finishes, every
    destination file has every line, and a real aggregator's node log accounts for every
    record (kept + reported dropped + corrupt = emitted)."""
    from tests.aggregator.spoolkit import cli, finish, ledger, log_path, started

    ranks, lines = 100, 2000
    body = (
        "setup_logger()\n"
        "rank = int(os.environ['RANK'])\n"
        "for i in range(2000):\n"
        "    os.write(2, f'rank {rank} line {i} '.encode() + b'.' * 100 + b'\\n')\n"
    )
    script = tmp_path / "rank.py"
    script.write_text("import os\nfrom nvrx_otel.logging import setup_logger\n" + body)
    procs = []
    for rank in range(ranks):
        env = process_env(tmp_path, "testnode", RANK=str(rank), SLURM_JOB_ID="job1",
                          NVRX_OTEL_CAPTURE_OUTPUT="auto",
                          NVRX_OTEL_CAPTURE_STACKS="on")  # fmt: skip
        with (tmp_path / f"rank{rank}.err").open("wb") as err:
            procs.append(spawn([sys.executable, str(script)], stdout=subprocess.DEVNULL,
                               stderr=err, env=env))  # fmt: skip
    assert [p.wait(timeout=600) for p in procs] == [0] * ranks
    pids = {p.pid for p in procs}
    # a rank's exit waits at most EXIT_WAIT_S for its watcher: a hundred may be later
    wait_for(lambda: not watcher_pids(pids), 300, "every watcher to finish")
    for rank in range(ranks):
        assert (tmp_path / f"rank{rank}.err").read_bytes().count(b"\n") == lines
    agg = cli(tmp_path)
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg, timeout=300)
    assert code == 0, err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert len(kept) + dropped + corrupt == ranks * (lines + 1)  # + each one's ending
    assert (
        sum(1 for m in kept if m.startswith("process ") and "exited with code 0" in m)
        + (dropped + corrupt)
        >= ranks
    )


def test_a_spawned_child_that_sets_up_logging_again_is_not_captured_twice(
    tmp_path: Path,
) -> None:
    """A ``spawn`` worker re-runs the main module's setup: what it prints is one record
    (its ancestor's watcher has it), not two."""
    r = run(
        tmp_path,
        """\
        import multiprocessing
        setup_logger()
        def work():
            print("from the spawned worker", flush=True)
        if __name__ == "__main__":
            p = multiprocessing.get_context("spawn").Process(target=work)
            p.start(); p.join()
            print("parent done", flush=True)
    """,
    )
    assert r.proc.returncode == 0
    assert r.captured("stdout") == ["from the spawned worker", "parent done"]


def test_a_rank_exit_waits_for_its_watcher_to_take_the_last_output(tmp_path: Path) -> None:
    """The rank's last output (a traceback) reaches the terminal or the launcher before the
    rank ends: its exit waits until the watcher has read the pipes, EXIT_WAIT_S at most.
    Here the watcher is stopped, so the wait is the whole bound, and then the output
    still arrives, once the watcher goes on."""
    from nvrx_otel.watch.capture import EXIT_WAIT_S

    r = start(
        tmp_path,
        """\
        setup_logger()
        sys.stderr.write("last words\\n")
        sys.stderr.flush()
        open("ready", "w").close()
        while not os.path.exists("go"):
            time.sleep(0.01)
        """,
    )
    wait_for(lambda: (tmp_path / "ready").exists(), 60, "the rank to write")
    wait_for(lambda: watcher_pids({r.proc.pid}), 30, "the watcher")
    (watcher,) = watcher_pids({r.proc.pid})
    os.kill(watcher, signal.SIGSTOP)
    try:
        went = time.monotonic()
        (tmp_path / "go").touch()
        assert r.wait(60) == 0
        took = time.monotonic() - went
    finally:
        os.kill(watcher, signal.SIGCONT)
    assert took >= EXIT_WAIT_S
    assert r.captured("stderr") == ["last words"]
    assert r.err.read_bytes() == b"last words\n"
