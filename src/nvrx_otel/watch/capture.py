"""The rank's side of its watcher: the pipes on fd 1 and 2, faulthandler's, the notes.

:func:`start` runs once per process, when its first spool writer is made (every front end
makes one: ``setup_logger``, ``configure_logging``, ``setup_tracing`` with a spool, the
distro, a ``SpoolHandler``). It starts the watcher (``watcher.py``) and then:

- for each of fd 1 and 2 to capture (``NVRX_OTEL_CAPTURE_OUTPUT``: by default those that
  are not a terminal) puts a pipe to the watcher in its place; the watcher forwards every
  byte to the original destination. Python's ``sys.stdout``/``sys.stderr`` keep their
  objects and buffering (they write to the same descriptor numbers), and ``isatty()``
  stays false as it was. The rank keeps a read end of each pipe so that a write never
  gets ``EPIPE``; if the watcher dies, a thread puts the original descriptors back and
  forwards what the pipes still hold (those lines are counted as dropped);
- with ``NVRX_OTEL_CAPTURE_STACKS`` (on by default) has ``faulthandler`` write every
  thread's stack to the watcher at a fatal signal (unless the program enabled
  faulthandler itself: its dump on stderr is then captured as one record) and at SIGTERM
  (chained, so the signal then takes its previous course), and at the stacks signal
  (``NVRX_OTEL_STACKS_SIGNAL``) if the program has no handler of its own for it. A
  SIGTERM handler installed later with ``signal.signal`` keeps the dump in front of it.

A forked child keeps the captured descriptors (its output is captured too), but neither
the notes nor the dumps: it gets ``faulthandler`` on its stderr, so a crash of a data
loader worker still leaves one record, its dump, in the rank's captured stderr.
"""

from __future__ import annotations

import atexit
import faulthandler
import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from typing import Any, Final

import orjson

from nvrx_otel import env
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.writer import SpoolWriter
from nvrx_otel.watch import notes
from nvrx_otel.watch.ending import read_stat
from nvrx_otel.watch.watcher import SPEC_VAR

PIPE_SIZE: Final = 1 << 20
"""Asked for each captured pipe (the kernel's ``pipe-max-size`` caps it)."""
_F_SETPIPE_SZ: Final = 1031
EXIT_WAIT_S: Final = 5.0
"""How long a rank's exit waits for its watcher to take what the captured pipes hold, so
that its last output (a traceback) reaches the terminal or the launcher before it ends."""
_SHED: Final = DropReasonValues.CAPTURE_BACKLOG.value

_state: dict[str, Any] = {}
_lock = threading.Lock()


def started() -> bool:
    """Whether this process has a watcher."""
    return _state.get("pid") == os.getpid()


def notes_fd() -> int:
    """The notes pipe of this process's watcher, -1 without one (or in a forked child)."""
    return int(_state.get("notes", -1)) if started() else -1


def captured(stream: int) -> bool:
    """Whether fd ``stream`` (1 or 2) of this process is captured now."""
    return started() and stream in _state.get("captured", ())


def expect(stream: int, text: str) -> None:
    """Tell the watcher that ``text``, about to be written to ``stream`` (through
    ``sys.stdout``/``sys.stderr``, whose encoding it is encoded with), is a record already
    (it forwards it, and does not record it twice)."""
    fd = notes_fd()
    if fd >= 0 and captured(stream):
        py = sys.stderr if stream == 2 else sys.stdout
        encoding = getattr(py, "encoding", None) or "utf-8"
        errors = getattr(py, "errors", None) or "strict"
        notes.send_expected(fd, stream, text.encode(encoding, errors))


def note(kind: str, **fields: Any) -> None:
    """Send a note (``notes.py``) to this process's watcher, if it has one."""
    fd = notes_fd()
    if fd >= 0:
        notes.send(fd, {"k": kind, **fields})


CAPTURED_VAR: Final = "NVRX_OTEL_CAPTURED_PIPES"
"""The pipes (``<dev>:<inode>``, comma-separated) this process and its ancestors put on fd
1 and 2, inherited by children: a child (a ``spawn`` worker that sets up logging again)
writing into one is captured already, by its ancestor's watcher, and is not again."""


def _pipe_id(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _decide(fd: int, setting: bool | None) -> bool:
    try:
        st = os.fstat(fd)
    except OSError:
        return False  # closed: nothing to capture
    if _pipe_id(st) in os.environ.get(CAPTURED_VAR, "").split(","):
        return False  # an ancestor's watcher records what goes in there
    if setting is None:
        return not os.isatty(fd)
    return setting


def start(writer: SpoolWriter) -> None:
    """Start this process's watcher for ``writer``'s spool (once; see the module
    docstring). Never raises: a failure is said once on stderr and nothing is captured."""
    if os.environ.get(SPEC_VAR) is not None or env.DISABLED.get():
        return
    with _lock:
        if _state.get("tried") == os.getpid():
            return
        _state["tried"] = os.getpid()
        try:
            _start(writer)
        except Exception as exc:
            env.warn_once(f"cannot start the output and stack watcher: {exc!r}")


def _pipe() -> tuple[int, int]:
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(w, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # the default size: writes block sooner, nothing else changes
    return r, w


def _start(writer: SpoolWriter) -> None:
    capture_setting = env.CAPTURE_OUTPUT.get()
    stacks = bool(env.CAPTURE_STACKS.get())
    stacks_sig = env.STACKS_SIGNAL.get() if stacks else None
    streams = [(n, name) for n, name in ((1, "stdout"), (2, "stderr"))
               if _decide(n, capture_setting)]  # fmt: skip
    if not streams and not stacks:
        return
    me = os.getpid()
    stat = read_stat(me)
    if stat is None:
        raise OSError(f"cannot read /proc/{me}/stat")
    keep: list[int] = []  # the rank's ends, closed if the start fails
    give: list[int] = []  # the watcher's ends, closed here once it has them
    spec_streams = []
    pipes: dict[int, tuple[int, int, int]] = {}
    try:
        for n, name in streams:
            r, w = _pipe()
            saved = fcntl.fcntl(n, fcntl.F_DUPFD_CLOEXEC, 3)
            keep += [w, saved]
            give.append(r)
            pipes[n] = (r, w, saved)
            spec_streams.append([name, n, r, saved])
        try:  # the watcher's handle on this process, made before it can die unseen
            pidfd = os.pidfd_open(me)
        except (AttributeError, OSError):
            pidfd = -1
        if pidfd >= 0:
            give.append(pidfd)
        notes_r, notes_w = _pipe()
        os.set_blocking(notes_w, False)
        keep.append(notes_w)
        give.append(notes_r)
        dumps: list[list[Any]] = []
        dump_fds: dict[str, int] = {}
        if stacks:
            wanted: list[tuple[str, str | None]] = [("terminate", "SIGTERM")]
            if not faulthandler.is_enabled():
                wanted.insert(0, ("fatal", None))
            if stacks_sig is not None and signal.getsignal(stacks_sig) in (signal.SIG_DFL, None):
                wanted.append(("requested", signal.Signals(stacks_sig).name))
            for reason, sig in wanted:
                r, w = _pipe()
                keep.append(w)
                give.append(r)
                dump_fds[reason] = w
                dumps.append([r, sig, reason])
        spec = {
            "pid": me,
            "pidfd": pidfd,
            "start": stat.start_time,
            "dir": str(writer.directory),
            "proc": f"{writer._proc_name}-watch",
            "max_file_size": writer.max_file_size,
            "budget": writer.budget,
            "max_record": writer.max_record,
            "identity": writer.identity_fields,
            "resource": writer._resource,
            "streams": spec_streams,
            "notes": notes_r,
            "dumps": dumps,
            "ending": stacks,
        }
        child_env = dict(os.environ)
        child_env[SPEC_VAR] = orjson.dumps(spec, default=str).decode()
        # opentelemetry-instrument's sitecustomize would set up telemetry in the watcher
        path = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep)
                if p and not p.rstrip("/").endswith("auto_instrumentation")]  # fmt: skip
        child_env["PYTHONPATH"] = os.pathsep.join(path)
        err = pipes[2][2] if 2 in pipes else 2
        proc = subprocess.Popen(
            [sys.executable, "-m", "nvrx_otel.watch.watcher"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            pass_fds=[*give, *(p[2] for p in pipes.values())],
            start_new_session=True,
            env=child_env,
        )
    except BaseException:
        for fd in keep + give:
            _close(fd)
        raise
    for fd in give:
        if fd not in (p[0] for p in pipes.values()):
            _close(fd)  # the rank keeps the read ends of the captured pipes (no EPIPE)
    ids = [i for i in os.environ.get(CAPTURED_VAR, "").split(",") if i]
    for n, (_r, w, _saved) in pipes.items():
        _flush_python(n)
        os.dup2(w, n)
        _close(w)
        ids.append(_pipe_id(os.fstat(n)))
    if pipes:
        os.environ[CAPTURED_VAR] = ",".join(ids[-16:])
    _state.update(
        pid=me,
        proc=proc,
        writer=writer,
        notes=notes_w,
        captured=tuple(pipes),
        pipes={n: (r, saved) for n, (r, _w, saved) in pipes.items()},
        dumps=dump_fds,
        stacks_signal=stacks_sig,
    )
    if "fatal" in dump_fds:
        faulthandler.enable(file=dump_fds["fatal"], all_threads=True)
    if "terminate" in dump_fds:
        _register(signal.SIGTERM, dump_fds["terminate"])
    if "requested" in dump_fds and stacks_sig is not None:
        faulthandler.register(stacks_sig, file=dump_fds["requested"], all_threads=True)
    threading.Thread(target=_lifeline, args=(proc,), name="nvrx-otel-watcher", daemon=True).start()
    atexit.register(_at_exit)


def _register(sig: int, fd: int) -> None:
    """Dump on ``sig`` then let it take its previous course (unless it is ignored)."""
    if signal.getsignal(sig) is signal.SIG_IGN:
        return
    faulthandler.register(sig, file=fd, all_threads=True, chain=True)
    if getattr(signal.signal, "_nvrx_otel", False):
        return
    original = signal.signal

    def chained_signal(signalnum: Any, handler: Any) -> Any:
        """``signal.signal``, keeping the SIGTERM dump in front of the new handler."""
        fd = (_state.get("dumps") or {}).get("terminate") if started() else None
        if fd is None or signalnum != signal.SIGTERM:
            return original(signalnum, handler)
        faulthandler.unregister(signal.SIGTERM)
        try:
            return original(signalnum, handler)
        finally:
            if handler is not signal.SIG_IGN:
                faulthandler.register(signal.SIGTERM, file=fd, all_threads=True, chain=True)

    chained_signal._nvrx_otel = True  # type: ignore[attr-defined]
    signal.signal = chained_signal


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _flush_python(fd: int) -> None:
    stream = sys.stdout if fd == 1 else sys.stderr
    try:
        if stream is not None:
            stream.flush()
    except Exception:
        pass


def _at_exit() -> None:
    if started():
        for n in _state.get("captured", ()):
            _flush_python(n)
        note("exit")
        _wait_taken(time.monotonic() + EXIT_WAIT_S)


def _wait_taken(deadline: float) -> None:
    """Wait (until ``deadline``) for the watcher to have read what the captured pipes hold."""
    for n in _state.get("captured", ()):
        while time.monotonic() < deadline:
            try:
                held = struct.unpack("i", fcntl.ioctl(n, termios.FIONREAD, b"\0" * 4))[0]
            except OSError:
                break
            if held <= 0:
                break
            time.sleep(0.005)


def _lifeline(proc: subprocess.Popen[bytes]) -> None:
    """If the watcher dies before the rank, put the original descriptors back (a pipe
    nobody reads would block the rank once full) and forward what the pipes hold."""
    try:
        code = proc.wait()
    except Exception:
        return
    if not started():
        return
    restore(f"the output watcher (pid {proc.pid}) ended with status {code}")


def restore(why: str) -> None:
    """Put the original fd 1 and 2 back; forward and count what the pipes still hold."""
    with _lock:
        pipes: dict[int, tuple[int, int]] = _state.pop("pipes", {})
        _state["captured"] = ()
        for n, (r, saved) in pipes.items():
            _flush_python(n)
            try:
                os.dup2(saved, n)
            except OSError:
                continue
            lost = _drain(r, saved)
            writer = _state.get("writer")
            if lost and writer is not None:
                writer.count_lost(lost, _SHED)
            _close(r)
            _close(saved)
    if pipes:
        env.warn_once(f"{why}; stdout and stderr are no longer captured")


def _drain(r: int, dest: int) -> int:
    """Forward what pipe ``r`` holds to ``dest``; the number of lines in it."""
    os.set_blocking(r, False)
    lines = 0
    while True:
        try:
            data = os.read(r, 65536)
        except OSError:
            break
        if not data:
            break
        lines += data.count(b"\n")
        try:
            os.write(dest, data)
        except OSError:
            pass
    return lines


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    dumps = _state.get("dumps") or {}
    if not dumps:
        return
    try:  # the rank's dump pipes are the rank's: a child dumps on its own stderr
        if "fatal" in dumps:
            faulthandler.enable(file=2, all_threads=True)
        if "terminate" in dumps:
            faulthandler.unregister(signal.SIGTERM)
        stacks_sig = _state.get("stacks_signal")
        if "requested" in dumps and stacks_sig is not None:
            faulthandler.unregister(stacks_sig)
    except Exception:
        pass


os.register_at_fork(after_in_child=_after_fork_in_child)
