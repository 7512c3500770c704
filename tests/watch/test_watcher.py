"""How a rank ended, with real processes: fatal signals, SIGTERM, the stacks signal, exit
codes, SIGKILL; each leaves its record and the process's exit status is unchanged."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.aggregator.spoolkit import wait_for
from tests.watch.watchkit import Run, run, start

BLOCKED = """\
setup_logger()
def blocked_in_collective():
    print("ready", flush=True)
    time.sleep(60)
"""


def _dumps(r: Run) -> list[dict[str, Any]]:
    return [x for x in r.records() if "nv.nvrx.process.stacks" in x.get("attrs", {})]


def _started(r: Run) -> None:
    wait_for(lambda: b"ready" in r.out.read_bytes(), 30, "the rank to start")


@pytest.mark.parametrize(
    ("crash", "name", "status"),
    [
        ("ctypes.string_at(0)", "SIGSEGV", -signal.SIGSEGV),
        ("os.abort()", "SIGABRT", -signal.SIGABRT),
        # raised as the kernel raises them at a fault: faulthandler's handler runs the same
        ("os.kill(os.getpid(), signal.SIGFPE)", "SIGFPE", -signal.SIGFPE),
        ("os.kill(os.getpid(), signal.SIGBUS)", "SIGBUS", -signal.SIGBUS),
        ("os.kill(os.getpid(), signal.SIGILL)", "SIGILL", -signal.SIGILL),
    ],
)
def test_a_fatal_signal_leaves_every_threads_stack_as_one_fatal_record(
    tmp_path: Path, crash: str, name: str, status: int
) -> None:
    r = run(tmp_path, f"""\
        setup_logger()
        threading.Thread(target=time.sleep, args=(60,), name="loader", daemon=True).start()
        def crash_here():
            {crash}
        crash_here()
    """)  # fmt: skip
    assert r.proc.returncode == status  # as without the package
    ending = r.ending()
    (dump,) = _dumps(r)
    assert dump["sev"] == 21 and dump["lvl"] == "FATAL"
    assert dump["attrs"] == {"nv.nvrx.process.signal": name, "nv.nvrx.process.stacks": "fatal"}
    assert dump["exc_type"] == name and dump["fn"] in ("crash_here", "string_at", "kill")
    assert "in crash_here" in dump["exc"] and dump["exc"].count("Thread 0x") == 1
    assert "_lifeline" not in dump["exc"]  # the package's own thread is left out
    assert ending["attrs"] == {"nv.nvrx.process.signal": name, "nv.nvrx.process.outcome": "signal"}
    assert "Fatal Python error" not in r.err.read_text()  # the dump went to the watcher


def test_sigterm_records_the_stacks_and_still_kills(tmp_path: Path) -> None:
    r = start(tmp_path, BLOCKED + "blocked_in_collective()\n")
    _started(r)
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait() == -signal.SIGTERM
    ending = r.ending()
    (dump,) = _dumps(r)
    assert dump["lvl"] == "WARNING" and dump["fn"] == "blocked_in_collective"
    assert dump["attrs"]["nv.nvrx.process.stacks"] == "terminate"
    assert ending["attrs"]["nv.nvrx.process.signal"] == "SIGTERM"
    assert "(its stacks are recorded)" in ending["msg"]


def test_sigterm_still_runs_a_handler_installed_after_setup(tmp_path: Path) -> None:
    handler = (
        "def handler(signum, frame):\n"
        "    print('handler ran', flush=True)\n"
        "    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, handler)\n"
        "blocked_in_collective()\n"
    )
    r = start(tmp_path, BLOCKED + handler)
    _started(r)
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait() == 3
    ending = r.ending()
    assert b"handler ran" in r.out.read_bytes()
    (dump,) = _dumps(r)
    assert dump["fn"] == "blocked_in_collective"
    assert ending["attrs"] == {"process.exit.code": 3, "nv.nvrx.process.outcome": "exit"}


def test_the_stacks_signal_records_and_carries_on(tmp_path: Path) -> None:
    r = start(tmp_path, BLOCKED + "blocked_in_collective()\n", NVRX_OTEL_STACKS_SIGNAL="SIGUSR1")
    _started(r)
    r.proc.send_signal(signal.SIGUSR1)
    (dump,) = wait_for(lambda: _dumps(r), 30, "the stacks record")
    assert dump["lvl"] == "INFO" and dump["fn"] == "blocked_in_collective"
    assert dump["attrs"] == {
        "nv.nvrx.process.signal": "SIGUSR1",
        "nv.nvrx.process.stacks": "requested",
    }
    assert r.proc.poll() is None  # it carries on
    r.proc.kill()
    r.wait()


def test_a_faulthandler_the_program_enabled_stays_and_its_dump_is_one_record(
    tmp_path: Path,
) -> None:
    r = run(
        tmp_path,
        """\
        faulthandler.enable()
        setup_logger()
        def crash_here():
            ctypes.string_at(0)
        crash_here()
    """,
    )
    assert r.proc.returncode == -signal.SIGSEGV
    ending = r.ending()
    err = r.err.read_text()
    assert err.startswith("Fatal Python error: Segmentation fault") and "in crash_here" in err
    (dump,) = _dumps(r)
    assert dump["attrs"]["nv.nvrx.process.signal"] == "SIGSEGV" and "in crash_here" in dump["exc"]
    assert not [x for x in r.captured("stderr") if "crash_here" in x]  # not also as lines
    assert ending["attrs"]["nv.nvrx.process.outcome"] == "signal"


@pytest.mark.parametrize(("body", "code"), [("os._exit(7)", 7), ("sys.exit(0)", 0), ("pass", 0)])
def test_the_exit_code_is_recorded(tmp_path: Path, body: str, code: int) -> None:
    r = run(tmp_path, f"setup_logger()\n{body}\n")
    assert r.proc.returncode == code
    ending = r.ending()
    assert ending["attrs"] == {"process.exit.code": code, "nv.nvrx.process.outcome": "exit"}
    assert ending["lvl"] == ("INFO" if code == 0 else "ERROR")
    assert ending["pid"] == r.proc.pid and ending["rank"] == 0


def test_a_forked_child_does_not_speak_for_the_rank(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        """\
        setup_logger()
        pid = os.fork()
        if pid == 0:
            ctypes.string_at(0)
        os.waitpid(pid, 0)
        print("parent done", flush=True)
    """,
    )
    assert r.proc.returncode == 0
    ending = r.ending()
    assert ending["attrs"]["nv.nvrx.process.outcome"] == "exit"
    dumps = _dumps(r)  # the child's crash: its own dump on stderr, one record
    assert len(dumps) == 1 and dumps[0]["attrs"]["nv.nvrx.process.signal"] == "SIGSEGV"
    assert os.path.exists(r.out) and b"parent done" in r.out.read_bytes()


def test_what_the_watcher_records_reaches_otlp_with_the_ranks_identity(tmp_path: Path) -> None:
    """Captured lines, the SIGTERM dump and the ending go through the aggregator to OTLP
    like any record: the rank's resource, pid and attributes, the severities of the table."""
    from tests.aggregator.spoolkit import config, running
    from tests.otlp_receiver import OtlpReceiver

    r = start(
        tmp_path, BLOCKED + "sys.stderr.write('NCCL WARN net down\\n')\nblocked_in_collective()\n"
    )
    _started(r)
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait() == -signal.SIGTERM
    r.watcher_done()
    with OtlpReceiver() as receiver, running(config(tmp_path, otlp_endpoint=receiver.endpoint)):
        receiver.wait_for(
            lambda rc: any("nv.nvrx.process.outcome" in x["attributes"] for x in rc.logs), 60
        )
    logs = receiver.logs
    (line,) = [x for x in logs if x["body"] == "NCCL WARN net down"]
    assert line["attributes"]["log.iostream"] == "stderr" and line["severity_text"] == "STDERR"
    (dump,) = [x for x in logs if x["attributes"].get("nv.nvrx.process.stacks") == "terminate"]
    assert dump["severity_text"] == "WARNING"
    assert "in blocked_in_collective" in dump["attributes"]["exception.stacktrace"]
    (end,) = [x for x in logs if "nv.nvrx.process.outcome" in x["attributes"]]
    assert end["attributes"]["nv.nvrx.process.signal"] == "SIGTERM"
    for x in (line, dump, end):
        assert x["resource"]["process.pid"] == r.proc.pid, x
        assert x["resource"]["nv.nvrx.workload.rank"] == 0, x
