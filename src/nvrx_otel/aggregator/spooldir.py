"""The job's spool directory: which files exist, whose they are, which are final.

Files are tracked by inode: a name that comes to mean another file (deleted and made
again) is a new file, read from its start, while the old one is drained from the
descriptor the aggregator holds. A file is *final* (its writer adds nothing more) when
its writer is gone (no lock on the writer's newest file) or when a newer file of the same
writer has existed for a settling time (the writer moved on; a thread of it may still be
inside one last ``os.write`` to the old file for a moment, so nothing is concluded about
the old file's tail, and it is not deleted, before that).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from nvrx_otel.aggregator.health import say
from nvrx_otel.aggregator.reader import SpoolFile, open_spool_file, writer_gone
from nvrx_otel.aggregator.state import FileProgress
from nvrx_otel.spool.paths import parse_name


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

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            say(message)

    def scan(self) -> None:
        """Pick up new files, notice replaced and vanished names."""
        try:
            names = os.listdir(self.path)
        except OSError as exc:
            self._warn_once("listdir", f"cannot list spool directory {self.path}: {exc}")
            return
        present: set[str] = set()
        for name in names:
            if name.startswith("."):
                continue
            parts = parse_name(name)
            if parts is None:
                continue
            present.add(name)
            try:
                ino = os.stat(self.path / name, follow_symlinks=False).st_ino
            except OSError:
                continue  # deleted between listing and stat
            old = self.by_name.get(name)
            if old is not None and old.ino == ino:
                continue
            if old is not None:
                old.vanished = True
            try:
                f = open_spool_file(self.path, name, parts)
            except OSError as exc:
                self._warn_once(f"open:{name}", f"cannot read spool file {name}: {exc}")
                continue
            self.by_name[name] = f
            self.tracked.append(f)
        for name in list(self.by_name):
            if name not in present:
                self.by_name.pop(name).vanished = True
        self._regroup()

    def _regroup(self) -> None:
        groups: dict[str, list[SpoolFile]] = {}
        for f in self.tracked:
            groups.setdefault(f.writer, []).append(f)
        for files in groups.values():
            files.sort(key=lambda f: (f.parts.index, not f.vanished))
        self._groups = dict(sorted(groups.items()))

    def restore(self, progress: dict[str, FileProgress]) -> None:
        """Resume files from committed progress (same inode and header, else from 0)."""
        for name, f in self.by_name.items():
            p = progress.get(name)
            if p is not None and p.ino == f.ino and (p.hdr == f.hdr_crc or not p.hdr):
                f.offset = f.done = f.committed = p.offset

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
            gone = True if newest is None else writer_gone(newest)
            if gone:  # a writer whose files all vanished may still write to the newest inode
                gone = all(writer_gone(f) for f in files if f.vanished and f.fd >= 0)
            self._gone[writer] = gone
        return gone

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
        total = 0
        for f in self.tracked:
            try:
                size = os.fstat(f.fd).st_size if f.fd >= 0 else f.size
            except OSError:
                size = f.size
            total += max(0, size - f.done)
        return total

    def live_writers(self) -> int:
        return sum(1 for w, _ in self.writers() if not self.writer_gone(w))

    def delete(self, f: SpoolFile) -> bool:
        """Unlink (if its name still means it) and forget a fully consumed file."""
        try:
            if os.fstat(f.fd).st_size != f.offset:
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
        f.close()
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
