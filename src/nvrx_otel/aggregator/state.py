"""The aggregator's committed progress: ``<job dir>/.nvrx_aggregator.state.json``.

One JSON document, replaced atomically (write a temporary file, fsync it, ``os.replace``,
fsync the directory). It holds, per spool file, the inode and the offset up to which every
record is in the node log; the node log's path, inode and committed length; and the
rotation state (per-writer counts of what each node-log file holds, and a rotation in
progress). The node log is fsynced before each commit, so after any crash the node log
holds at least the committed length, and a restart truncates it back to exactly that:
every record is in the node log exactly once.

The spool's file system may fill up (writers outrunning the aggregator): the state then
cannot be written there, and without a commit nothing could be written or deleted. A commit
that fails there goes to a *fallback* file next to the node log instead (the node log must
be writable anyway for records to be delivered); every document carries a commit counter,
and loading takes the newer of the two. The first commit that works in the job directory
again removes the fallback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from nvrx_otel.aggregator.health import say
from nvrx_otel.aggregator.nodelog import Backup, RotationPlan, Stats
from nvrx_otel.spool.paths import STATE_NAME

STATE_VERSION: Final = 1
SINKS: Final = ("otlp", "otlp_json")
"""The sinks besides the node log, by the key their progress has in the state document."""


class StateError(ValueError):
    """The state file exists but cannot be used; the message says why."""


@dataclass
class FileProgress:
    """How far one spool file is in the node log."""

    ino: int
    offset: int
    hdr: int = 0  # crc32 of the header line: tells a recreated file with a reused inode


@dataclass
class LogProgress:
    """The node log as of the last commit."""

    path: str
    ino: int
    length: int
    stats: Stats = field(default_factory=dict)
    backups: list[Backup] = field(default_factory=list)
    rotating: RotationPlan | None = None
    collapsed: int = 0  # NodeLogFile.collapsed


@dataclass
class WriterState:
    """What the OTLP sink keeps of one writer: from its header, its last timestamp, the
    spans it started and has not ended, and loss reports not yet sent."""

    resource: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    budget: int = 0
    max_file: int = 0
    last_ts: int = 0
    open_spans: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending_reports: list[dict[str, Any]] = field(default_factory=list)

    def copy(self) -> WriterState:
        """A copy whose containers can change apart from this one's."""
        return WriterState(
            resource=self.resource,
            identity=dict(self.identity),
            budget=self.budget,
            max_file=self.max_file,
            last_ts=self.last_ts,
            open_spans=dict(self.open_spans),
            pending_reports=list(self.pending_reports),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "last_ts": self.last_ts,
            "open": self.open_spans,
            "res": self.resource,
            "id": self.identity,
            "budget": self.budget,
            "max": self.max_file,
            "reports": self.pending_reports,
        }

    @classmethod
    def from_json(cls, s: dict[str, Any]) -> WriterState:
        return cls(
            resource=dict(s.get("res") or {}),
            identity=dict(s.get("id") or {}),
            budget=int(s.get("budget") or 0),
            max_file=int(s.get("max") or 0),
            last_ts=int(s.get("last_ts") or 0),
            open_spans=dict(s.get("open") or {}),
            pending_reports=list(s.get("reports") or []),
        )


@dataclass
class OtlpProgress:
    """The OTLP sink's progress: per spool file the inode and the offset up to which
    everything was acknowledged (or reported dropped), per writer its state, and how many
    records the OTLP backlog skipped."""

    cursors: dict[str, tuple[int, int]] = field(default_factory=dict)
    writers: dict[str, WriterState] = field(default_factory=dict)
    skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "cursors": {n: [ino, offset] for n, (ino, offset) in self.cursors.items()},
            "writers": {w: s.to_json() for w, s in self.writers.items()},
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> OtlpProgress:
        return cls(
            cursors={str(n): (int(c[0]), int(c[1])) for n, c in doc.get("cursors", {}).items()},
            writers={str(w): WriterState.from_json(s) for w, s in doc.get("writers", {}).items()},
            skipped=int(doc.get("skipped") or 0),
        )


@dataclass
class State:
    """One commit: every sink's cursors (the node log's ``files``, OTLP's ``otlp``)."""

    files: dict[str, FileProgress] = field(default_factory=dict)
    log: LogProgress | None = None
    totals: dict[str, int] = field(default_factory=dict)
    sinks: dict[str, OtlpProgress] = field(default_factory=dict)  # "otlp", "otlp_json"
    seq: int = 0  # commit counter: of the job directory's and the fallback's, the newer wins


def state_path(job_dir: Path) -> Path:
    return job_dir / STATE_NAME


# --- encoding -------------------------------------------------------------------------------


def _backup_json(b: Backup) -> dict[str, Any]:
    doc: dict[str, Any] = {"ino": b.ino, "stats": b.stats}
    if b.collapsed:
        doc["collapsed"] = b.collapsed
    return doc


def _plan_json(p: RotationPlan) -> dict[str, Any]:
    return {
        "unlink": p.unlink,
        "renames": p.renames,
        "deleted": [_backup_json(b) for b in p.deleted],
        "backups": [_backup_json(b) for b in p.backups],
    }


def encode(state: State) -> bytes:
    log = state.log
    doc: dict[str, Any] = {
        "v": STATE_VERSION,
        "n": state.seq,
        "files": {n: [f.ino, f.offset, f.hdr] for n, f in state.files.items()},
        "totals": state.totals,
        **{name: progress.to_json() for name, progress in state.sinks.items()},
        "log": None
        if log is None
        else {
            "path": log.path,
            "ino": log.ino,
            "len": log.length,
            "stats": log.stats,
            "collapsed": log.collapsed,
            "backups": [_backup_json(b) for b in log.backups],
            "rotating": None if log.rotating is None else _plan_json(log.rotating),
        },
    }
    return orjson.dumps(doc)


def _backup(obj: Any) -> Backup:
    return Backup(int(obj["ino"]), dict(obj["stats"]), int(obj.get("collapsed", 0)))


def _plan(obj: Any) -> RotationPlan:
    return RotationPlan(
        unlink=[(str(n), int(i)) for n, i in obj["unlink"]],
        renames=[(str(a), str(b), int(i)) for a, b, i in obj["renames"]],
        deleted=[_backup(b) for b in obj["deleted"]],
        backups=[_backup(b) for b in obj["backups"]],
    )


def decode(data: bytes) -> State:
    """Parse a state document; ``StateError`` for anything that is not one."""
    try:
        doc = orjson.loads(data)
        if not isinstance(doc, dict) or doc.get("v") != STATE_VERSION:
            raise StateError(f"not a version-{STATE_VERSION} aggregator state")
        files = {
            str(n): FileProgress(int(v[0]), int(v[1]), int(v[2])) for n, v in doc["files"].items()
        }
        totals = {str(k): int(v) for k, v in doc.get("totals", {}).items()}
        raw = doc.get("log")
        log = None
        if raw is not None:
            log = LogProgress(
                path=str(raw["path"]),
                ino=int(raw["ino"]),
                length=int(raw["len"]),
                stats=dict(raw["stats"]),
                collapsed=int(raw.get("collapsed", 0)),
                backups=[_backup(b) for b in raw["backups"]],
                rotating=None if raw.get("rotating") is None else _plan(raw["rotating"]),
            )
        sinks = {
            name: OtlpProgress.from_json(doc[name])
            for name in SINKS
            if isinstance(doc.get(name), dict)
        }
        if "otlp" in sinks and "otlp_json" not in doc:
            # Written when one OTLP cursor served the endpoint and the JSON files alike.
            sinks["otlp_json"] = sinks["otlp"]
        return State(
            files=files,
            log=log,
            totals=totals,
            sinks=sinks,
            seq=int(doc.get("n", 0)),
        )
    except StateError:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise StateError(f"malformed aggregator state: {type(exc).__name__}: {exc}") from None


# --- files ----------------------------------------------------------------------------------


def load(job_dir: Path, fallback: Path | None = None) -> State | None:
    """The committed state (the newer of the job directory's and ``fallback``), None when
    there is none; ``StateError`` when the one to use is unusable."""
    try:
        primary = _load(state_path(job_dir))
    except StateError:
        if fallback is None:
            raise
        other = _load(fallback)
        if other is None:
            raise
        return other
    if fallback is None:
        return primary
    try:
        other = _load(fallback)
    except StateError:
        if primary is None:
            raise
        return primary
    if other is None or (primary is not None and primary.seq >= other.seq):
        return primary
    return other


def _load(path: Path) -> State | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc}") from None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        return decode(b"".join(chunks))
    except StateError as exc:
        raise StateError(f"{path}: {exc}") from None


def commit(job_dir: Path, state: State, fallback: Path | None = None) -> OSError | None:
    """Replace the state file atomically and durably; when that fails, the ``fallback``
    file instead. Returns None when the job directory has it, else why it could not (the
    fallback has it); raises OSError when neither could be written."""
    return commit_data(job_dir, encode(state), fallback)


def commit_data(job_dir: Path, data: bytes, fallback: Path | None = None) -> OSError | None:
    """:func:`commit` of an encoded state."""
    try:
        _replace(state_path(job_dir), data)
    except OSError as exc:
        if fallback is None:
            raise
        try:
            _replace(fallback, data)
        except OSError:
            raise exc from None
        return exc
    if fallback is not None:
        try:
            os.unlink(fallback)  # the job directory's is newer: the fallback is stale
        except FileNotFoundError:
            pass
    return None


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` whole through a temporary file, fsync, rename, fsync the directory
    (a temporary file that could not be written whole is removed: it would hold space)."""
    tmp = path.with_name(f"{path.name}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        view = memoryview(data)
        written = 0
        while written < len(data):
            written += os.write(fd, view[written:])
        os.fsync(fd)
    except OSError:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class StateStore:
    """The job's committed state: numbered commits to the job directory, or to the fallback
    while that fails (said once when commits move there, and when they come back)."""

    def __init__(self, job_dir: Path, fallback: Path) -> None:
        self.job_dir = job_dir
        self.fallback = fallback
        self.seq = 0  # the last commit's number
        self._error = ""  # why commits go to the fallback ("" while they do not)

    def load(self) -> State | None:
        saved = load(self.job_dir, self.fallback)
        if saved is not None:
            self.seq = max(self.seq, saved.seq)
        return saved

    def commit(self, state: State) -> None:
        """Commit ``state`` under the next number (OSError when it cannot be anywhere)."""
        self.write(self.prepare(state))

    def prepare(self, state: State) -> bytes:
        """``state`` under the next number, encoded: nothing that changes after this call
        changes what :meth:`write` (possibly on another thread) commits."""
        self.seq += 1
        state.seq = self.seq
        return encode(state)

    def write(self, data: bytes) -> None:
        """Commit a state :meth:`prepare` made (OSError when it cannot be anywhere)."""
        error = commit_data(self.job_dir, data, self.fallback)
        message = "" if error is None else str(error)
        if message and not self._error:
            say(
                f"cannot commit progress in {self.job_dir} ({message}): committing to "
                f"{self.fallback} until it can"
            )
        elif self._error and not message:
            say(f"committing progress in {self.job_dir} again")
        self._error = message
