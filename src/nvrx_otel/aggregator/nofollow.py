"""Opening the aggregator's output files without following a symlink.

The node log and the ``--otlp-json`` files live in directories other users may be able to
write into (a shared log directory). A symlink planted under an output file's name would
make the aggregator append to, or truncate, whatever it points at, so every output file is
opened with ``O_NOFOLLOW``, and a symlink there is refused with one clear line.
"""

from __future__ import annotations

import errno
import os
from typing import Final

_FLAGS: Final = os.O_NOFOLLOW | os.O_CLOEXEC


class SymlinkRefused(OSError):
    """An output file's name is a symlink: nothing was opened."""

    def __str__(self) -> str:
        return f"{self.filename} is a symlink; refusing to write through it"


def open_output(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode)``; :class:`SymlinkRefused`
    when ``path`` is a symlink (``ELOOP``; ``EACCES`` in a sticky directory others can
    write into, where Linux refuses another user's symlink first: protected_symlinks)."""
    try:
        return os.open(path, flags | _FLAGS, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EACCES) and os.path.islink(path):
            raise SymlinkRefused(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path)) from None
        raise
