"""The run file written in the calling thread through our own descriptor (``enqueue=False``
with rotation while running, JSON lines or per-worker files; otherwise loguru's own file
sink writes it)."""

from __future__ import annotations

import os
import weakref
from typing import Any

from nvrx_otel.logging.logflow.queued import Encode, encode_or_fallback, encode_text
from nvrx_otel.logging.logflow.runfilewriter import PathFor, RunFile, losses


class DirectFile:
    """A loguru sink object (``write``/``stop``): one ``os.write`` per line, in the caller.

    ``worker_path``, when given, names the file a forked child writes instead of its
    parent's."""

    def __init__(
        self, file: RunFile, encode: Encode = encode_text, worker_path: PathFor | None = None
    ) -> None:
        self.file = file
        self.path = file.path
        self.encode = encode
        self.worker_path = worker_path
        self.closed = False
        _files.add(self)

    def write(self, message: Any) -> None:
        if self.closed:
            return
        data = encode_or_fallback(self.encode, message)
        try:
            self.file.append(data)
        except Exception as exc:  # disk full or gone: the spool still has the record
            losses.add(self.file.path, exc)

    def stop(self) -> None:
        if not self.closed:
            self.closed = True
            self.file.close()

    def _after_fork_in_child(self) -> None:
        if self.worker_path is not None and not self.closed:
            try:
                self.file.reopen_as(self.worker_path(os.getpid()), owner=True)
                self.path = self.file.path
            except OSError:
                pass  # it keeps writing to its parent's file


_files: weakref.WeakSet[DirectFile] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for f in list(_files):
        f._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
