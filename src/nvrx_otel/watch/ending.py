"""How a process ended, as far as its node can know, and the record that says so.

The exit status of a process that is not our child: between its death and its parent's
``wait``, in ``/proc/<pid>/stat`` of the zombie (``exit_code``, Linux 3.5+); once reaped,
from the pidfd held since the start (``PIDFD_GET_INFO`` with ``PIDFD_INFO_EXIT``, Linux
6.15+). Where neither works the ending is told from what the process itself said (an
uncaught exception, ``atexit``) and what the watcher saw (a fatal signal's dump, a
SIGTERM's). Outcomes (``nv.nvrx.process.outcome``):

- ``exit``: it exited (``process.exit.code`` when seen; 0 is a clean exit);
- ``exception``: an uncaught exception ended it (exit code 1 as Python's);
- ``signal``: a signal killed it (``nv.nvrx.process.signal``; SIGTERM after its stacks were
  recorded, a fatal one after its dump);
- ``vanished``: none of these is known — it died without a word, as ``SIGKILL`` and the
  OOM killer leave a process.
"""

from __future__ import annotations

import fcntl
import signal as _signal
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from nvrx_otel import record as rec
from nvrx_otel.watch.dumps import LOGGER


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the watcher needs."""

    state: str
    start_time: int
    exit_code: int | None
    """The raw wait status (zombies only; None while alive or where the kernel has none)."""


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` of ``pid``, None once it is gone (reaped) or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    # fields[0] is field 3 (state); field N is fields[N - 3]
    try:
        start = int(fields[22 - 3])
        code = int(fields[52 - 3]) if len(fields) >= 52 - 2 else None
    except (IndexError, ValueError):
        return None
    state = fields[0]
    return ProcStat(state, start, code if state in ("Z", "X") else None)


_PIDFD_GET_INFO: Final = (3 << 30) | (64 << 16) | (0xFF << 8) | 11  # _IOWR(0xFF, 11, 64 bytes)
_PIDFD_INFO_EXIT: Final = 1 << 3
_EXIT_CODE_AT: Final = 60  # struct pidfd_info: mask, cgroupid, 11 ids, then exit_code


def reaped_status(pidfd: int) -> int | None:
    """The wait status of the reaped process of ``pidfd``, None while it is not reaped or
    where the kernel cannot tell (before Linux 6.15)."""
    buf = bytearray(64)
    struct.pack_into("Q", buf, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, buf, True)
    except OSError:
        return None
    if not struct.unpack_from("Q", buf, 0)[0] & _PIDFD_INFO_EXIT:
        return None
    return int(struct.unpack_from("i", buf, _EXIT_CODE_AT)[0])


def signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class Ending:
    """What the watcher learned of how its process ended."""

    pid: int
    status: int | None = None
    """The raw wait status, when it was read from the zombie."""
    exception: str | None = None
    exited: bool = False
    """``atexit`` ran (the interpreter finished normally)."""
    dumps: list[str] = field(default_factory=list)
    """The signals whose stacks were recorded (``SIGTERM``, ``SIGSEGV``, ...)."""
    fatal: str | None = None

    def outcome(self) -> tuple[str, dict[str, Any]]:
        """``(outcome, attributes)``, see the module docstring."""
        attrs: dict[str, Any] = {}
        if self.status is not None:
            sig = self.status & 0x7F
            if sig:
                attrs["nv.nvrx.process.signal"] = signal_name(sig)
                return "signal", attrs
            code = (self.status >> 8) & 0xFF
            attrs["process.exit.code"] = code
            return ("exception" if self.exception and code == 1 else "exit"), attrs
        if self.fatal:
            attrs["nv.nvrx.process.signal"] = self.fatal
            return "signal", attrs
        if self.exception:
            return "exception", attrs
        if self.exited:
            return "exit", attrs
        if "SIGTERM" in self.dumps:
            attrs["nv.nvrx.process.signal"] = "SIGTERM"
            return "signal", attrs
        return "vanished", attrs

    def record(self, ts: int) -> dict[str, Any]:
        outcome, attrs = self.outcome()
        code = attrs.get("process.exit.code")
        sig = attrs.get("nv.nvrx.process.signal")
        if outcome == "exit":
            how = "exited" + (f" with code {code}" if code is not None else " (code not seen)")
            clean = code == 0 or (code is None and not self.exception)
        elif outcome == "exception":
            how = f"ended on an uncaught {self.exception}"
            how += f" (exit code {code})" if code is not None else ""
            clean = False
        elif outcome == "signal":
            how = f"was killed by {sig}"
            if sig in self.dumps:
                how += " (its stacks are recorded)"
            clean = False
        else:
            how = "vanished: no exit status, exception or signal seen (SIGKILL or the OOM killer?)"
            clean = False
        if clean:
            sev, lvl = 9, "INFO"
        elif outcome != "signal":
            sev, lvl = 17, "ERROR"
        elif sig == "SIGTERM":  # stopped by the launcher: a victim, mostly
            sev, lvl = 13, "WARNING"
        else:
            sev, lvl = 21, "FATAL"
        attrs["nv.nvrx.process.outcome"] = outcome
        return {
            "k": rec.KIND_LOG,
            "ts": ts,
            "sev": sev,
            "lvl": lvl,
            "lg": LOGGER,
            "msg": f"process {self.pid} {how}",
            "file": "nvrx_watch",
            "line": 0,
            "attrs": attrs,
        }
