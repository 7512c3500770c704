"""Reconfiguring while running (``reload_signal``): DEBUG toggled or the files re-read on
a signal of the user's choice, no record lost or doubled across the switch, off by
default, a bad reload keeps what runs."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from nvrx_otel.logging.logflow import configure, configure_logging, get_logger, shutdown_logging
from nvrx_otel.logging.logflow.configure import current_run_file
from tests.aggregator.spoolkit import wait_for
from tests.logs.logflow.kit import messages, run_script, spool_logs


def _applied() -> object:
    return configure._state.applied_levels


def _signal_and_wait(sig: int) -> None:
    """Send ``sig`` to this process and wait until the reload thread has acted on it."""
    reloader = configure._state.reloader
    assert reloader is not None, "no reload handler installed"
    before = reloader.handled
    os.kill(os.getpid(), sig)
    wait_for(lambda: reloader.handled > before, timeout=30, what="the reload handled")


def test_off_by_default() -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGUSR2)}
    configure_logging(console_level="CRITICAL")
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert configure._state.reloader is None


def test_debug_toggles_on_and_off(capfd: pytest.CaptureFixture[str]) -> None:
    configure_logging(script_name="run", file_level="INFO", console_level="CRITICAL",
                      reload_signal="SIGUSR2")  # fmt: skip
    log = get_logger("t")
    log.debug("hidden 1")
    _signal_and_wait(signal.SIGUSR2)
    log.debug("shown")
    _signal_and_wait(signal.SIGUSR2)
    log.debug("hidden 2")
    log.info("info")
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    assert messages(path) == ["shown", "info"]
    err = capfd.readouterr().err
    assert "SIGUSR2: DEBUG on" in err and "SIGUSR2: DEBUG off" in err


def test_no_record_lost_or_doubled_across_switches(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    code = """
    import os, signal, threading, json
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    from nvrx_otel.logging.logflow import configure
    configure_logging(script_name="run", file_level="INFO", console_level="CRITICAL",
                      reload_signal="SIGHUP")
    log = get_logger("t")
    stop = threading.Event()
    counts = {}
    progress = [0, 0]  # each writer's iterations so far
    def writer(n):
        i = 0
        while not stop.is_set():
            log.info("w{} {}", n, i)
            log.debug("d{} {}", n, i)
            i += 1
            progress[n] = i
        counts[n] = i
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for _ in range(20):
        before = configure._state.applied_levels
        os.kill(os.getpid(), signal.SIGHUP)
        while configure._state.applied_levels is before:
            pass
        # both writers log whole iterations under each setting before the next switch
        mark = list(progress)
        while any(p < m + 2 for p, m in zip(progress, mark)):
            pass
    stop.set()
    for t in threads:
        t.join()
    shutdown_logging()
    print(json.dumps(counts))
    """
    proc = run_script(tmp_path, "run", code, timeout=120, NVRX_NODE_LOCAL_TMPDIR=str(spool))
    assert proc.returncode == 0, proc.stderr
    import json

    counts = {int(k): v for k, v in json.loads(proc.stdout).items()}
    want = sorted(f"w{n} {i}" for n, c in counts.items() for i in range(c))
    in_file = sorted(m for m in messages(tmp_path / "logs" / "run.log") if m.startswith("w"))
    assert in_file == want
    in_spool = sorted(r["msg"] for r in spool_logs(spool) if r["msg"].startswith("w"))
    assert in_spool == want
    debug = [m for m in messages(tmp_path / "logs" / "run.log") if m.startswith("d")]
    assert debug, "DEBUG was never on during the ten on-switches"


def test_reload_reads_the_files_again(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "logflow.yaml"
    config.write_text("file_level: WARNING\nreload_signal: SIGHUP\nreload_action: reload\n")
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("noisy.mod")
    log.info("before: hidden")
    config.write_text(
        "file_level: INFO\nreload_signal: SIGHUP\nreload_action: reload\nretention: 9\n"
        "module_levels:\n  tests.logs: {file: ERROR}\n"  # this module: by the caller's name
    )
    _signal_and_wait(signal.SIGHUP)
    log.warning("warning: hidden by the new rule")
    get_logger("other").error("after: shown")
    config.write_text("file_level: [not, a, level]\nreload_signal: SIGHUP\n")
    before = _applied()
    capfd.readouterr()
    _signal_and_wait(signal.SIGHUP)
    err = capfd.readouterr().err
    assert "SIGHUP: the configuration was not reloaded" in err and "file_level" in err, err
    assert _applied() is before
    get_logger("other").error("still: shown")
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    assert messages(path) == ["after: shown", "still: shown"]


def test_reload_says_what_needs_a_restart(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "logflow.yaml"
    config.write_text("reload_signal: SIGHUP\nreload_action: reload\n")
    configure_logging(script_name="run", console_level="CRITICAL")
    config.write_text("reload_signal: SIGHUP\nreload_action: reload\nretention: 9\n")
    capfd.readouterr()
    _signal_and_wait(signal.SIGHUP)
    err = capfd.readouterr().err
    assert "applied only at the next start: retention" in err, err


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGKILL", "SIGTERM", "SIGNOPE", "9"])
def test_signals_the_job_needs_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="reload_signal"):
        configure_logging(reload_signal=name)


def test_the_users_own_handler_still_runs_and_is_put_back() -> None:
    seen = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGUSR2, mine)
    try:
        configure_logging(console_level="CRITICAL", reload_signal="SIGUSR2")
        _signal_and_wait(signal.SIGUSR2)
        assert seen == [signal.SIGUSR2]
        from nvrx_otel.logging.logflow import reset_logging

        reset_logging()
        assert signal.getsignal(signal.SIGUSR2) is mine
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_configured_off_the_main_thread_says_reloading_is_off(
    capfd: pytest.CaptureFixture[str],
) -> None:
    t = threading.Thread(
        target=configure_logging,
        kwargs={"console_level": "CRITICAL", "reload_signal": "SIGUSR2"},
    )
    t.start()
    t.join()
    assert "must run in the main thread" in capfd.readouterr().err
    assert configure._state.reloader is None


FORKED_CHILD_SIGNALLED = """
    import os, signal, time
    from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", console_level="CRITICAL", file_level="INFO",
                      reload_signal="SIGHUP")
    log = get_logger("t")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r); os.write(w, b"x")
        time.sleep(3); os._exit(0)
    os.read(r, 1)
    os.kill(pid, signal.SIGHUP)
    time.sleep(1)  # a negative test: what the parent's reload thread would have done by now
    log.debug("parent debug")
    log.info("parent info")
    shutdown_logging(); os.waitpid(pid, 0)
"""


def test_reload_signal_to_a_forked_child_leaves_the_parent_alone(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "run", FORKED_CHILD_SIGNALLED)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "logs" / "run.log").read_text()
    assert "parent info" in text and "parent debug" not in text
    assert "DEBUG on" not in proc.stderr


def test_active_config_shows_the_levels_a_reload_applied() -> None:
    from nvrx_otel import get_active_config

    configure_logging(script_name="run", console_level="WARNING", file_level="INFO",
                      reload_signal="SIGHUP")  # fmt: skip
    _signal_and_wait(signal.SIGHUP)
    row = get_active_config().get("logflow", "file_level")
    assert row is not None and (row.value, row.source) == ("DEBUG", "reload signal SIGHUP")
    console = get_active_config().get("logflow", "console_level")
    assert console is not None and console.value == "DEBUG"
    _signal_and_wait(signal.SIGHUP)  # off again: the configured levels and their sources
    row = get_active_config().get("logflow", "file_level")
    assert row is not None and (row.value, row.source) == ("INFO", "configure_logging() argument")
