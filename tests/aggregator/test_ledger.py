"""Drops of writers that end without writing their drop record (``os._exit``, ``kill -9``)
are reported from the writers' drop ledgers, exactly once across aggregator restarts; a
writer under budget pressure wakes the aggregator."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from nvrx_otel.spool import sidecar, tally
from nvrx_otel.spool.writer import SpoolWriter
from tests.aggregator.spoolkit import (
    cli,
    config,
    finish,
    log_path,
    messages,
    running,
    spool_dir,
    started,
    wait_for,
)

_DROPPED = re.compile(r"^dropped (\d+) records from rank")


def _ledger(tmp: Path) -> tuple[int, int]:
    """(records from the writers in the node log, records reported dropped)."""
    msgs = messages(log_path(tmp))
    kept = sum(1 for m in msgs if m.startswith("rec "))
    dropped = sum(int(m_.group(1)) for m in msgs if (m_ := _DROPPED.match(m)))
    return kept, dropped


def _log(i: int) -> dict[str, object]:
    return {"k": "log", "ts": 1_700_000_000_000_000_000 + i, "sev": 9, "lvl": "INFO",
            "lg": "t", "msg": f"rec {i} " + "z" * 80}  # fmt: skip


def _burst_then_return(directory: str, n: int) -> None:
    """A multiprocessing child: multiprocessing ends it with os._exit (no atexit)."""
    w = SpoolWriter(Path(directory), max_file_size=4096, budget=8192)
    for i in range(n):
        w.emit(_log(i))


def test_multiprocessing_child_that_drops_for_budget_then_os_exits(tmp_path: Path) -> None:
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True)
    child = mp.get_context("fork").Process(target=_burst_then_return, args=(str(directory), 500))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert list(directory.glob(".*.drops"))  # the pending count outlived the process
    with running(config(tmp_path)):
        wait_for(lambda: sum(_ledger(tmp_path)) == 500, timeout=60, what="the ledger")
    kept, dropped = _ledger(tmp_path)
    assert dropped > 0 and kept + dropped == 500
    assert not list(directory.glob(".*.drops"))  # reported, then deleted


_KILLED = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from nvrx_otel.spool.writer import SpoolWriter
    w = SpoolWriter(Path(sys.argv[1]), max_file_size=4096, budget=8192)
    n = int(sys.argv[2])
    for i in range(n):
        w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
                "msg": f"rec {i} " + "z" * 80})
    print("dropping", flush=True)
    time.sleep(600)
    """
)


def _killed_while_dropping(tmp: Path, n: int) -> Path:
    directory = spool_dir(tmp)
    directory.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(directory), str(n)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "dropping"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    return directory


def test_rank_killed_by_sigkill_while_dropping(tmp_path: Path) -> None:
    directory = _killed_while_dropping(tmp_path, 700)
    with running(config(tmp_path)):
        wait_for(lambda: sum(_ledger(tmp_path)) == 700, timeout=60, what="the ledger")
    kept, dropped = _ledger(tmp_path)
    assert dropped > 0 and kept + dropped == 700
    assert not list(directory.glob(".*.drops"))


def test_ledger_report_is_made_once_across_restarts(tmp_path: Path) -> None:
    directory = _killed_while_dropping(tmp_path, 700)
    (path,) = directory.glob(".*.drops")
    unreported = path.read_bytes()
    with running(config(tmp_path)):
        wait_for(lambda: sum(_ledger(tmp_path)) == 700, timeout=60, what="the ledger")
    view = sidecar.read_view(unreported)
    assert view is not None
    missing = view.dropped - view.written
    length = log_path(tmp_path).stat().st_size
    ino = log_path(tmp_path).stat().st_ino

    def restart_with_note(offset: int) -> None:
        path.write_bytes(unreported)
        fd = os.open(path, os.O_RDWR)
        try:
            sidecar.mark_reported(fd, missing, ino, offset)
        finally:
            os.close(fd)
        with running(config(tmp_path)):
            wait_for(lambda: not path.exists(), timeout=60, what="the ledger deleted")

    # Killed after the commit that holds the report, before deleting the ledger.
    restart_with_note(length - 200)
    assert sum(_ledger(tmp_path)) == 700
    # Killed before that commit: the restart cut the report off the node log.
    restart_with_note(length)
    assert _ledger(tmp_path)[1] == 2 * missing


def test_writer_gone_with_nothing_unreported_leaves_no_ledger(tmp_path: Path) -> None:
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True)
    w = SpoolWriter(directory, max_file_size=4096, budget=8192)
    for i in range(300):
        w.emit(_log(i))
    w.close()  # the drop record holds every drop
    assert not list(directory.glob(".*.drops"))
    with running(config(tmp_path)):
        wait_for(lambda: sum(_ledger(tmp_path)) == 300, timeout=60, what="the ledger")


def test_drain_at_the_end_of_a_job_reports_ledgers_of_exited_children(tmp_path: Path) -> None:
    """The wait file is touched as soon as the children are gone: the drain must not end
    before their ledgers are reported."""
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True)
    ctx = mp.get_context("fork")
    children = [
        ctx.Process(target=_burst_then_return, args=(str(directory), 400)) for _ in range(4)
    ]
    for c in children:
        c.start()
    for c in children:
        c.join(60)
        assert c.exitcode == 0
    agg = cli(tmp_path)
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg, timeout=60)
    assert code == 0, err
    kept, dropped = _ledger(tmp_path)
    assert dropped > 0 and kept + dropped == 4 * 400
    assert not list(directory.glob(".*.drops"))


def test_loss_tally_is_reported_once_across_restarts(tmp_path: Path) -> None:
    """A writer that could make neither spool file nor ledger (a full file system) leaves
    its count in a tally's name: reported once its writer is gone, then deleted; a note
    inside the committed node log is not reported again, one cut off with it is."""
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True)
    t = tally.Tally(_dir_fd(directory), "rank3", 4242, "00000000000000c3", 3)
    assert t.store(150, "write_error")
    (path,) = directory.glob(".*.lost.*")
    assert path.name == ".rank3.p4242.00000000000000c3.lost.write_error.r3.150"
    with running(config(tmp_path)):
        for i in range(2):  # two passes of the aggregator (one record each) go by...
            w = SpoolWriter(directory)
            w.emit(_log(i))
            w.close()
            wait_for(lambda i=i: _ledger(tmp_path)[0] == i + 1, timeout=60, what="a record")
        assert _ledger(tmp_path)[1] == 0  # ...and its writer holds it: nothing reported
        t.forget_in_child()  # the writer ends (its lock goes)
        wait_for(lambda: _ledger(tmp_path)[1] == 150, timeout=60, what="the tally")
        wait_for(lambda: not path.exists(), timeout=60, what="the tally deleted")
    assert "from rank 3 pid 4242" in log_path(tmp_path).read_text()
    length = log_path(tmp_path).stat().st_size
    ino = log_path(tmp_path).stat().st_ino

    def restart_with_note(offset: int) -> None:
        noted = directory / tally.reported_name(path.name, ino, offset)
        noted.touch()
        with running(config(tmp_path)):
            wait_for(lambda: not noted.exists(), timeout=60, what="the tally deleted")

    restart_with_note(length - 100)  # committed: not again
    assert _ledger(tmp_path)[1] == 150
    restart_with_note(length)  # cut off with the node log: again
    assert _ledger(tmp_path)[1] == 300


def test_ledger_report_of_a_killed_writer_reaches_otlp_as_well_as_the_node_log(
    tmp_path: Path,
) -> None:
    """A drop ledger's report comes from no spool file; OTLP gets it all the same, so the
    OTLP side accounts for every record as the node log does."""
    from nvrx_otel import semconv
    from tests.otlp_receiver import OtlpReceiver

    _killed_while_dropping(tmp_path, 700)

    def otlp(r: OtlpReceiver) -> tuple[int, int]:
        logs = {log["attributes"][semconv.RECORD_KEY]: log for log in r.logs}.values()
        kept = sum(1 for log in logs if str(log["body"]).startswith("rec "))
        ledger = [log for log in logs if "-ledger-" in log["attributes"][semconv.RECORD_KEY]]
        return kept, sum(int(log["attributes"][semconv.DROP_COUNT]) for log in ledger)

    with OtlpReceiver() as receiver:
        with running(config(tmp_path, otlp_endpoint=receiver.endpoint)):
            wait_for(lambda: sum(_ledger(tmp_path)) == 700, timeout=60, what="the node log")
            assert receiver.wait_for(lambda r: sum(otlp(r)) >= 700, timeout=60)
        kept, dropped = otlp(receiver)
    assert dropped > 0 and (kept, dropped) == _ledger(tmp_path)


def test_tally_report_reaches_otlp_as_well_as_the_node_log(tmp_path: Path) -> None:
    """A loss tally's report comes from no spool file, like a ledger's: OTLP gets it too,
    so the receiver accounts for the lost records as the node log does."""
    from nvrx_otel import semconv
    from tests.otlp_receiver import OtlpReceiver

    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True)
    t = tally.Tally(_dir_fd(directory), "rank3", 4242, "00000000000000c3", 3)
    assert t.store(150, "write_error")
    t.forget_in_child()  # its writer is gone

    def reported(r: OtlpReceiver) -> int:
        logs = {log["attributes"][semconv.RECORD_KEY]: log for log in r.logs}.values()
        tallies = [log for log in logs if "-tally-" in log["attributes"][semconv.RECORD_KEY]]
        return sum(int(log["attributes"][semconv.DROP_COUNT]) for log in tallies)

    with OtlpReceiver() as receiver:
        with running(config(tmp_path, otlp_endpoint=receiver.endpoint)):
            wait_for(lambda: _ledger(tmp_path)[1] == 150, timeout=60, what="the node log")
            assert receiver.wait_for(lambda r: reported(r) >= 150, timeout=60)
        assert reported(receiver) == 150


def _dir_fd(directory: Path) -> int:
    """A descriptor of ``directory`` (writers make their files relative to one); closed
    with the test process."""
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
