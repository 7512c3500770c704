"""Uncaught exceptions as records: ``sys.excepthook`` and ``threading.excepthook``.

Each hook records one ERROR record (``exception.*``, the raising frame as its call site,
the span the exception escaped from as its context) and then calls the hook that was
installed before it, so the traceback is printed as before, torch's ``@record`` error
file is still written, and the exit code stays Python's. When stderr is captured, the
default hook's printed copy is announced to the watcher so it is not recorded a second
time; a hook of the program's own prints what it likes, and that is captured as is.
The watcher is told that the process ends on an exception (``ending.py``).
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import Any, Final

from nvrx_otel import _tracectx, levels
from nvrx_otel import record as rec
from nvrx_otel.spool.writer import SpoolWriter
from nvrx_otel.watch import capture

LOGGER: Final = "nvrx_otel.uncaught"
_installed: dict[str, Any] = {}


def exception_record(
    etype: type[BaseException],
    value: BaseException,
    tb: TracebackType | None,
    thread: threading.Thread | None,
) -> dict[str, Any]:
    """The record of an uncaught exception (without writer fields)."""
    where = "main" if thread is None or thread is threading.main_thread() else thread.name
    try:
        text = str(value)
    except Exception:
        text = "<unprintable>"
    out: dict[str, Any] = {
        "k": rec.KIND_LOG,
        "ts": time.time_ns(),
        "sev": levels.SEVERITY_BY_LEVEL["ERROR"],
        "lvl": "ERROR",
        "lg": LOGGER,
        "msg": f"uncaught {etype.__qualname__} in thread {where}: {text}",
        "attrs": {"nv.nvrx.process.uncaught": where},
    }
    if thread is not None:
        out["tid"], out["tn"] = thread.ident, thread.name
    frames = traceback.extract_tb(tb) if tb is not None else []
    if frames:
        last = frames[-1]
        out.update(path=last.filename, file=os.path.basename(last.filename),
                   line=last.lineno or 0, fn=last.name)  # fmt: skip
    ids = _tracectx.remembered(value)
    if ids is not None:
        out.update(ids)
    else:
        _tracectx.add_ids(out)
    try:
        out["exc"] = "".join(traceback.format_exception(etype, value, tb)).rstrip("\n")
    except Exception:  # an exception whose str() raises: its type is still known
        pass
    out["exc_type"] = etype.__qualname__
    out["exc_msg"] = text
    return out


def _record(writer: SpoolWriter, etype: Any, value: Any, tb: Any, thread: Any) -> None:
    try:
        if writer.pid != os.getpid() or value is None:
            return  # a forked child's exception is its own business (and not the rank's end)
        writer.emit(exception_record(etype, value, tb, thread))
        if thread is None or thread is threading.main_thread():
            capture.note("exc", t=etype.__qualname__)
    except Exception:  # telemetry never stands between the program and its traceback
        pass


def _print_announced(call: Any, default: bool) -> None:
    """Run the previous hook; when it is Python's own and stderr is captured, collect
    what it prints, announce it to the watcher, then write it."""
    err = sys.stderr  # (a wrapping hook's buffer, as torch.distributed's: see notes.py)
    if not default or err is None or not capture.captured(2):
        call()
        return
    buffer = io.StringIO()
    sys.stderr = buffer
    try:
        call()
    finally:
        sys.stderr = err
    text = buffer.getvalue()
    try:
        capture.expect(2, text)
    except Exception:
        pass
    err.write(text)
    err.flush()


def install(writer: SpoolWriter) -> None:
    """Install both hooks for ``writer`` (once per process; a later writer takes over)."""
    _installed["writer"] = writer
    if _installed.get("done"):
        return
    _installed["done"] = True
    previous = sys.excepthook

    def excepthook(etype: Any, value: Any, tb: Any) -> None:
        _record(_installed["writer"], etype, value, tb, None)
        _print_announced(lambda: previous(etype, value, tb), previous is sys.__excepthook__)

    previous_thread = threading.excepthook

    def thread_excepthook(args: Any) -> None:
        if args.exc_type is not SystemExit:
            _record(_installed["writer"], args.exc_type, args.exc_value, args.exc_traceback,
                    args.thread)  # fmt: skip
        _print_announced(lambda: previous_thread(args),
                         previous_thread is threading.__excepthook__)  # fmt: skip

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
