"""The job's spool directory: which files exist, whose they are, which are final.

Files are tracked by inode: a name that comes to mean another file (deleted and made
again) is a new file, read from its start, while the old one is drained from the
descriptor the aggregator holds. A file is *final* (its writer adds nothing more) when
its writer is gone (no lock on the writer's newest file) or when a newer file of the same
writer has existed for a settling time (the writer moved on; a thread of it may still be
inside one last ``os.write`` to the old file for a moment, so nothing is concluded about
the old file's tail, and it is not deleted, before that).

Descriptors stay bounded whatever the number of writers: at most :attr:`SpoolDir.max_open`
files are held open (a share of ``RLIMIT_NOFILE``). A file past that, or one whose writer
is done and that is read to its end, is *parked*: its descriptor is closed and it is
reopened by name when there is something to read, and used only if the name still means
the same inode and header. A file that cannot be opened for now (``EMFILE``) stays tracked
and is retried; it is never taken for read.

An entry with a spool file's name that can never be read — not a regular file (a
directory, a FIFO, a symlink), or a file the aggregator may not open (another user's) — is
no writer's file as far as the aggregator can know: no lock can be probed on it. It is said
once on stderr as unreadable, is not tracked (no drain waits for it, no live writer is
counted for it) and is tried again at each scan while it is a regular file, in case it
becomes readable.

Only files owned by the aggregator's own user are read (when it runs as root: root's
files; writers and aggregator run as one user). A file of another user under a spool
file's name (planted while the directory was writable by others, or by a process of
another user) is said once on stderr and never read: its lines could claim any rank.
"""

from __future__ import annotations

import errno
import os
import resource
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from nvrx_otel.aggregator.health import plural, say
from nvrx_otel.aggregator.reader import SpoolFile, header_crc, read_header, writer_gone
from nvrx_otel.aggregator.state import FileProgress
from nvrx_otel.spool.paths import SpoolFileName, parse_name

MAX_OPEN: Final = 512
"""At most this many spool files are open at once (fewer when RLIMIT_NOFILE is low)."""
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FOR_NOW: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR, errno.EAGAIN})
"""Errors opening a spool file that say nothing about the file: it is tried again later."""


def open_cap() -> int:
    """How many spool files may be open: half the descriptor limit less a reserve for the
    node log, the state, the lock and sockets, within 8..MAX_OPEN."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 64
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN
    return max(8, min(MAX_OPEN, soft // 2 - 16))


class SpoolDir:
    """The spool files of one job directory, grouped by writer in index order."""

    def __init__(self, path: Path, *, settle_s: float = 2.0) -> None:
        self.path = path
        self.settle_s = settle_s
        self.by_name: dict[str, SpoolFile] = {}
        self.tracked: list[SpoolFile] = []
        self._groups: dict[str, list[SpoolFile]] = {}
        self._gone: dict[str, bool] = {}  # per writer, for the current cycle
        self._reported: set[str] = set()
        self.unreadable: dict[str, tuple[int, bool]] = {}  # name -> inode, a regular file
        self.max_open = open_cap()
        self.open_count = 0
        self.unwaited: frozenset[str] = frozenset()
        """Writers the drain does not wait for (those of the process that stops an
        in-process aggregator: they live on after it). Their bytes are still all read."""

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            say(message)

    def scan(self) -> int:
        """Pick up new files, notice replaced and vanished names; how many files are new."""
        try:
            names = os.listdir(self.path)
        except OSError as exc:
            self._warn_once("listdir", f"cannot list spool directory {self.path}: {exc}")
            return 0
        new = 0
        present: set[str] = set()
        for name in names:
            if name.startswith("."):
                continue
            parts = parse_name(name)
            if parts is None:
                continue
            present.add(name)
            try:
                st = os.stat(self.path / name, follow_symlinks=False)
            except OSError:
                continue  # deleted between listing and stat
            ino, regular = st.st_ino, stat.S_ISREG(st.st_mode)
            old = self.by_name.get(name)
            if old is not None and old.ino == ino:
                continue
            was = self.unreadable.get(name)
            if was is not None and (was == (ino, False) or self.open_count >= self.max_open):
                continue  # not a regular file: never read; or no descriptor to retry with
            if old is not None:
                self._vanish(old)
            f = SpoolFile(name=name, parts=parts, fd=-1, ino=ino)
            if not regular:
                self._unreadable(f, False, "not a regular file")
                continue
            if st.st_uid != os.geteuid():
                self._foreign(f, st.st_uid)
                continue
            if self.open_count < self.max_open and not self.reopen(f) and f.unreadable:
                continue
            if was is not None:
                del self.unreadable[name]
                say(f"spool file {name} can be read now")
            self.by_name[name] = f
            self.tracked.append(f)
            new += 1
        for name in list(self.by_name):
            if name not in present:
                self._vanish(self.by_name.pop(name))
        for name in [n for n in self.unreadable if n not in present]:
            del self.unreadable[name]
        self._regroup()
        return new

    def _unreadable(self, f: SpoolFile, regular: bool, why: str) -> None:
        """``f`` can never be read (see the module): said once, no longer tracked."""
        f.unreadable = True
        self.unreadable[f.name] = (f.ino, regular)
        self._warn_once(
            f"unreadable:{f.name}:{f.ino}",
            f"cannot read spool entry {f.name} ({why}): no writer's lock can be probed on it, "
            "so the drain does not wait for it and whatever it holds is not in the node log",
        )
        if f in self.tracked:
            self.forget(f)

    def _foreign(self, f: SpoolFile, uid: int) -> None:
        """``f`` belongs to another user: never read (see the module), said once."""
        f.unreadable = True
        self.unreadable[f.name] = (f.ino, False)  # not retried while the name means it
        self._warn_once(
            f"foreign:{f.name}:{f.ino}",
            f"ignoring spool file {f.name}: owned by uid {uid}, not by this aggregator's user "
            f"({os.geteuid()}); only its own user's files are read",
        )
        if f in self.tracked:
            self.forget(f)

    def _vanish(self, f: SpoolFile) -> None:
        """``f``'s name is gone or means another file: read on from its descriptor, or,
        parked, forget it (said when bytes of it were never read)."""
        f.vanished = True
        if f.fd >= 0:
            return
        if f.size > f.offset or not f.final:
            say(
                f"spool file {f.name} was removed or replaced while parked, "
                f"{plural(max(f.size - f.offset, 0), 'byte')} after offset {f.offset} unread"
            )
        self.tracked = [t for t in self.tracked if t is not f]

    def reopen(self, f: SpoolFile) -> bool:
        """Open a parked file by name if the name still means it; False when it cannot be
        opened now (retried later) or the name is gone or means another file (the next
        scan notices)."""
        if f.fd >= 0:
            return True
        if f.vanished:
            return False
        try:
            fd = os.open(self.path / f.name, _OPEN_FLAGS)
        except FileNotFoundError:
            return False  # the next scan notices it is gone
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self._warn_once(
                    "emfile",
                    f"cannot open more spool files ({exc}); holding {self.open_count} open, "
                    "the others are read in turn",
                )
            elif exc.errno not in _FOR_NOW:
                self._unreadable(f, exc.errno != errno.ELOOP, exc.strerror or str(exc))
            return False
        try:
            st = os.fstat(fd)
            if st.st_ino != f.ino:
                os.close(fd)
                return False  # the name means another entry now: the next scan tracks it
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                self._unreadable(f, False, "not a regular file")
                return False
            if st.st_uid != os.geteuid():
                os.close(fd)
                self._foreign(f, st.st_uid)
                return False
            crc = header_crc(read_header(fd))
        except OSError as exc:
            os.close(fd)
            if exc.errno not in _FOR_NOW:
                self._unreadable(f, True, exc.strerror or str(exc))
            return False
        if f.hdr_crc and crc and crc != f.hdr_crc:
            os.close(fd)
            return False  # the name means another file now: the next scan tracks it
        f.fd = fd
        if not f.hdr_crc:
            f.hdr_crc = crc
        self.open_count += 1
        return True

    def park(self, f: SpoolFile) -> None:
        """Close ``f``'s descriptor (it is reopened by name when needed); a file whose
        name is gone keeps its descriptor, the only way left to it."""
        if f.fd >= 0 and not f.vanished:
            f.close()
            self.open_count -= 1

    def over_cap(self) -> bool:
        return self.open_count > self.max_open

    def current_size(self, f: SpoolFile) -> int:
        """The file's size now (by descriptor, else by name; its last seen size if gone)."""
        try:
            if f.fd >= 0:
                return os.fstat(f.fd).st_size
            if not f.vanished:
                st = os.stat(self.path / f.name, follow_symlinks=False)
                if st.st_ino == f.ino:
                    return st.st_size
        except OSError:
            pass
        return f.size

    def _regroup(self) -> None:
        groups: dict[str, list[SpoolFile]] = {}
        for f in self.tracked:
            groups.setdefault(f.writer, []).append(f)
        for files in groups.values():
            files.sort(key=lambda f: (f.parts.index, not f.vanished))
        self._groups = dict(sorted(groups.items()))

    def restore(self, progress: dict[str, FileProgress]) -> None:
        """Resume files from committed progress (same inode and header, else from 0)."""
        for name, f in list(self.by_name.items()):
            p = progress.get(name)
            if p is None or p.ino != f.ino:
                continue
            if p.hdr and not f.hdr_crc and self.reopen(f) and self.over_cap():
                self.park(f)  # opened to read its header only
            if p.hdr == f.hdr_crc or not p.hdr or not f.hdr_crc:  # unread header: by inode
                f.offset = f.done = f.committed = p.offset
                f.size = max(f.size, p.offset)

    def writers(self) -> Iterator[tuple[str, list[SpoolFile]]]:
        return iter(self._groups.items())

    def new_cycle(self) -> None:
        """Forget liveness probes of the previous cycle."""
        self._gone = {}

    def writer_gone(self, writer: str) -> bool:
        """No process holds the lock of the writer's newest file (probed once a cycle)."""
        gone = self._gone.get(writer)
        if gone is None:
            files = self._groups.get(writer) or []
            newest = next((f for f in reversed(files) if not f.vanished), None)
            gone = True if newest is None else self._probe(newest)
            if gone and newest is not None:
                gone = not self._moved_on(newest)
            if gone:  # a writer whose files all vanished may still write to the newest inode
                gone = all(writer_gone(f) for f in files if f.vanished and f.fd >= 0)
            self._gone[writer] = gone
        return gone

    def _probe(self, f: SpoolFile) -> bool:
        """Whether no writer holds ``f``'s lock. A parked file seen without one stays so (a
        writer takes its lock before the file has its name and keeps it until it is done);
        one that cannot be opened now counts as live (it is asked again later)."""
        if f.fd >= 0:
            f.seen_gone = writer_gone(f)
            return f.seen_gone
        if f.seen_gone:
            return True
        if not self.reopen(f):
            return f.vanished or f.unreadable
        f.seen_gone = writer_gone(f)
        self.park(f)
        return f.seen_gone

    def _moved_on(self, f: SpoolFile) -> bool:
        """Whether the writer of ``f`` (found unlocked) has named its next file since the
        directory was scanned: a writer names and locks its next file before it unlocks the
        one before, so that file exists by now, and the writer lives on in it."""
        nxt = SpoolFileName(f.parts.writer, f.parts.index + 1, f.parts.pid, f.parts.proc)
        return os.path.lexists(self.path / nxt.name)

    def is_newest(self, f: SpoolFile) -> bool:
        files = self._groups.get(f.writer) or []
        return bool(files) and files[-1] is f

    def final(self, f: SpoolFile, now: float) -> bool:
        """The writer will add nothing to ``f``."""
        if not self.is_newest(f):
            if f.newer_since is None:
                f.newer_since = now
            if now - f.newer_since >= self.settle_s:
                return True
        return self.writer_gone(f.writer)

    def backlog(self) -> int:
        """Bytes of spool files not yet in the node log (as the files are now)."""
        return sum(max(0, self.current_size(f) - f.done) for f in self.tracked)

    def drained(self) -> bool:
        """Every writer is gone and every byte of its files is read: probed afresh, then
        the directory listed again (a file a writer made just before it ended counts), then
        each file's size taken now, not as last read (a file scanned but not yet read has
        none)."""
        self.new_cycle()
        if not all(w in self.unwaited or self.writer_gone(w) for w in list(self._groups)):
            return False
        if self.scan():
            return False
        return all(
            not f.tail and self.current_size(f) <= f.offset
            for f in self.tracked
            if f.fd >= 0 or not f.vanished
        )

    def live_writers(self) -> int:
        """Writers still running, other than those the drain does not wait for."""
        return sum(
            1 for w, _ in self.writers() if w not in self.unwaited and not self.writer_gone(w)
        )

    def delete(self, f: SpoolFile) -> bool:
        """Unlink (if its name still means it) and forget a fully consumed file."""
        try:
            if self.current_size(f) != f.offset:
                return False  # grew after all: keep reading it
            if not f.vanished:
                path = self.path / f.name
                if os.stat(path, follow_symlinks=False).st_ino == f.ino:
                    os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._warn_once(f"unlink:{f.name}", f"cannot delete spool file {f.name}: {exc}")
            return False
        self.forget(f)
        return True

    def forget(self, f: SpoolFile) -> None:
        if f.fd >= 0:
            f.close()
            self.open_count -= 1
        if self.by_name.get(f.name) is f:
            del self.by_name[f.name]
        self.tracked = [t for t in self.tracked if t is not f]
        self._regroup()

    def close(self) -> None:
        for f in self.tracked:
            f.close()
        self.tracked = []
        self.by_name = {}
        self._groups = {}
        self.open_count = 0
