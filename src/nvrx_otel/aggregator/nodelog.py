"""The node log: NVRx's line grammar, and the file it goes to (with size rotation).

One record becomes (one line)::

    <local time YYYY-MM-DD HH:MM:SS,mmm> [<LEVEL>] [<node id>]
    [workload:<r>(<lr>) infra:<r>(<lr>)] <file>:<line> <message>

``?`` stands for an unknown rank; `` [trace_id=<32 hex> span_id=<16 hex>]`` ends the line
when the record was written inside a span. Further lines of the message and the
exception text follow, each indented by four spaces, so none reads as a record. Control
characters other than tab are written as ``\\xNN`` (no ANSI escape reaches the file raw),
and the line and paragraph separators U+2028 and U+2029 as ``\\u2028`` and ``\\u2029``
(readers that split lines on them would otherwise see a record broken in two).

The file sink appends with ``O_APPEND``, fsyncs on request, and rotates by renaming to
``.1``, ``.2``, ...; how a rotation survives a crash is the service's business (it commits
the plan first), this module only carries out idempotent steps.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 controls except tab, DEL, C1 controls (U+0080..U+009F, e.g. the one-byte CSI) and the
Unicode line and paragraph separators."""
_INDENT: Final = "    "
_NS: Final = 1_000_000_000
_MS: Final = 1_000_000
_STAMPS: dict[int, str] = {}
"""Local-time text per whole second (most records share their second with the previous)."""
_STAMPS_MAX: Final = 4096


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with control characters (other than tab) written as ``\\xNN`` and the line
    and paragraph separators as ``\\u2028`` / ``\\u2029``."""
    return _CONTROL.sub(_escape_one, text)


def _stamp(sec: int) -> str:
    text = _STAMPS.get(sec)
    if text is None:
        if len(_STAMPS) >= _STAMPS_MAX:
            _STAMPS.clear()
        try:
            text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sec))
        except (OverflowError, OSError, ValueError):
            text = "????-??-?? ??:??:??"
        _STAMPS[sec] = text
    return text


def local_time(ts_ns: int) -> str:
    """``YYYY-MM-DD HH:MM:SS,mmm`` in local time for a timestamp in ns since the epoch."""
    return f"{_stamp(ts_ns // _NS)},{ts_ns // _MS % 1000:03d}"


def _field(value: Any, default: str = "?") -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else str(value)


def _slow_format(record: dict[str, Any], node: str) -> str:
    """Any record, however odd its fields: never raises."""
    g = record.get
    ts = g("ts")
    stamp = local_time(ts) if isinstance(ts, int) else "????-??-?? ??:??:??,???"
    msg = str(g("msg", ""))
    exc = g("exc")
    text = f"{msg}\n{_field(exc, '')}" if exc else msg
    text = text.rstrip("\n")
    first, _, rest = text.partition("\n")
    head = (
        f"{stamp} [{g('lvl', '?')}] [{node}] [workload:{_field(g('rank'))}"
        f"({_field(g('lrank'))}) infra:{_field(g('irank'))}({_field(g('ilrank'))})] "
        f"{_file_of(record)}:{g('line', '?')} {first}"
    )
    if "trace_id" in record:
        head = f"{head} [trace_id={record['trace_id']} span_id={g('span_id', '?')}]"
    lines = [escape(head)]
    if rest:
        lines.extend(_INDENT + escape(part) for part in rest.split("\n"))
    lines.append("")
    return "\n".join(lines)


_BASENAMES: dict[str, str] = {}


def source_file(path: str) -> str:
    """The base name of a call site's path (records carry ``path``; ``file`` is optional)."""
    name = _BASENAMES.get(path)
    if name is None:
        name = path.rpartition("/")[2] or path
        if len(_BASENAMES) < 4096:
            _BASENAMES[path] = name
    return name


def _file_of(record: dict[str, Any]) -> str:
    file = record.get("file")
    if file is None:
        path = record.get("path")
        file = source_file(path) if isinstance(path, str) else "?"
    return str(file)


def format_record(record: dict[str, Any], node_id: str) -> str:
    """The node-log text of one record (a ``record.LogRecord`` dict): its line, any
    continuation lines, and the final ``\\n``. Never raises, whatever the fields hold."""
    return format_records((record,), escape(node_id))


def format_records(records: Iterable[dict[str, Any]], node: str) -> str:
    """The node-log text of many records (``node`` already escaped), equal to joining
    :func:`format_record` of each; checks every record for what needs care."""
    out: list[str] = []
    append = out.append
    search = _CONTROL.search
    stamps = _STAMPS
    last_sec = -1
    stamp = ""
    for d in records:
        try:
            ts = d["ts"]
            sec = ts // _NS
            if sec != last_sec:
                stamp = stamps.get(sec) or _stamp(sec)
                last_sec = sec
            g = d.get
            ranks = (
                f"[workload:{g('rank', '?')}({g('lrank', '?')}) "
                f"infra:{g('irank', '?')}({g('ilrank', '?')})]"
            )
            file = d.get("file") or source_file(d["path"])
            line = (
                f"{stamp},{ts // _MS % 1000:03d} [{d['lvl']}] [{node}] {ranks} "
                f"{file}:{d['line']} {d['msg']}"
            )
            if "trace_id" in d:
                line = f"{line} [trace_id={d['trace_id']} span_id={g('span_id', '?')}]"
            if (
                search(line) is None
                and "exc" not in d
                and ts.__class__ is int
                and "None" not in ranks
            ):
                append(line)
                continue
        except Exception:  # odd fields: the careful path below copes with anything
            pass
        append(_slow_format(d, node)[:-1])
    if not out:
        return ""
    out.append("")
    return "\n".join(out)


def _rank_block(node: str, rank: Any, lrank: Any, irank: Any, ilrank: Any) -> str:
    return (
        f"[{node}] [workload:{_field(rank)}({_field(lrank)}) "
        f"infra:{_field(irank)}({_field(ilrank)})]"
    )


class _NotClean(Exception):
    pass


def format_clean_records(records: list[dict[str, Any]], node: str) -> str:
    """:func:`format_records` for records known to be *clean*: no string holds a control
    character, so no newline either (the reader tells this from the raw JSON: see
    :func:`is_clean`). Falls back to the careful path on anything else. This is the
    aggregator's hot path."""
    out: list[str] = []
    append = out.append
    stamps = _STAMPS
    blocks: dict[tuple[Any, Any, Any, Any], str] = {}
    last_sec = -1
    stamp = ""
    try:
        for d in records:
            ts = d["ts"]
            sec = ts // _NS
            if sec != last_sec:
                stamp = stamps.get(sec) or _stamp(sec)
                last_sec = sec
            g = d.get
            key = (g("rank"), g("lrank"), g("irank"), g("ilrank"))
            block = blocks.get(key)
            if block is None:
                block = blocks[key] = _rank_block(node, *key)
            if "exc" in d:
                raise _NotClean
            file = d.get("file") or source_file(d["path"])
            line = (
                f"{stamp},{ts // _MS % 1000:03d} [{d['lvl']}] {block} {file}:{d['line']} {d['msg']}"
            )
            if "trace_id" in d:
                line = f"{line} [trace_id={d['trace_id']} span_id={g('span_id', '?')}]"
            append(line)
    except Exception:  # an exception text, a missing or odd field: the careful path
        return format_records(records, node)
    if not out:
        return ""
    out.append("")
    return "\n".join(out)


_DIRTY_MARKS: Final = (b"\\", b"\x7f", b"\xc2")
_SEPARATORS: Final = (b"\xe2\x80\xa8", b"\xe2\x80\xa9")


def is_clean(raw: bytes) -> bool:
    """Whether orjson-encoded lines ``raw`` decode to records whose strings hold no control
    character: JSON writes C0 controls (newline included) as ``\\`` escapes but DEL raw,
    C1 controls start with byte ``0xc2`` in UTF-8, and orjson writes U+2028 and U+2029
    raw (lead byte ``0xe2``, looked for in full only when that byte is there: a one-byte
    search is ``memchr``, a three-byte one a hundred times slower). A false positive only
    costs the careful path."""
    if any(mark in raw for mark in _DIRTY_MARKS):
        return False
    return b"\xe2" not in raw or not any(sep in raw for sep in _SEPARATORS)


# --- the file ------------------------------------------------------------------------------


Stats = dict[str, list[Any]]
"""Per writer id: ``[rank or None, pid or None, count, first_ts, last_ts]`` of the records a
node-log file holds (log records plus the counts of loss reports), for rotation reports."""


def add_stats(
    stats: Stats, writer: str, rank: Any, pid: Any, count: int, first: int, last: int
) -> None:
    """Account ``count`` records of ``writer`` (timestamps ``first``..``last``) to ``stats``."""
    entry = stats.get(writer)
    if entry is None:
        stats[writer] = [rank, pid, count, first, last]
        return
    entry[2] += count
    if first < entry[3]:
        entry[3] = first
    if last > entry[4]:
        entry[4] = last


@dataclass
class Backup:
    """A rotated node-log file (``.1`` is the newest) and what it holds."""

    ino: int
    stats: Stats = field(default_factory=dict)


@dataclass
class RotationPlan:
    """The renames of one rotation, by inode, so a restart can finish it idempotently."""

    unlink: list[tuple[str, int]]  # (name, inode) to delete
    renames: list[tuple[str, str, int]]  # (from name, to name, inode), oldest first
    deleted: list[Backup]  # what the deleted files held (reported as dropped)
    backups: list[Backup]  # the backup list after the rotation, .1 first


def backup_name(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


class NodeLogFile:
    """``<log dir>/nvrx_log_<node id>.log``: append, fsync, truncate, rotate."""

    def __init__(self, path: Path, *, max_bytes: int = 0, backups: int | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = backups
        self.fd = -1
        self.ino = 0
        self.length = 0
        self.stats: Stats = {}
        self.backups: list[Backup] = []

    def open(self) -> None:
        """Open (creating) the file for appending; ``length`` is its current size."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644
        )
        st = os.fstat(fd)
        self.close()
        self.fd, self.ino, self.length = fd, st.st_ino, st.st_size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def truncate(self, length: int) -> None:
        """Cut the file back to ``length`` bytes (what a restart does with uncommitted text)."""
        os.ftruncate(self.fd, length)
        self.length = length

    def write(self, data: bytes) -> None:
        """Append ``data`` whole (a short write is finished; an error raises OSError)."""
        view = memoryview(data)
        written = 0
        while written < len(data):
            written += os.write(self.fd, view[written:])
        self.length += written

    def sync(self) -> None:
        os.fsync(self.fd)

    def needs_rotation(self) -> bool:
        return self.max_bytes > 0 and self.length >= self.max_bytes

    def plan_rotation(self) -> RotationPlan:
        """What rotating now does: ``.log`` becomes ``.1``, ``.n`` becomes ``.n+1``, and the
        backups beyond the number to keep are deleted."""
        on_disk: list[tuple[int, int]] = []  # (n, inode) of existing .1, .2, ...
        n = 1
        while True:
            try:
                on_disk.append((n, os.lstat(backup_name(self.path, n)).st_ino))
            except FileNotFoundError:
                break
            n += 1
        known = {b.ino: b for b in self.backups}
        chain = [Backup(self.ino, self.stats)] + [known.get(ino, Backup(ino)) for _, ino in on_disk]
        names = [self.path.name] + [backup_name(self.path, n).name for n, _ in on_disk]
        keep = len(chain) if self.keep is None else self.keep
        unlink = [(names[i], chain[i].ino) for i in range(keep, len(chain))]
        renames = [
            (names[i], backup_name(self.path, i + 1).name, chain[i].ino)
            for i in reversed(range(min(keep, len(chain))))
        ]
        return RotationPlan(unlink, renames, chain[keep:], chain[:keep])

    def apply_rotation(self, plan: RotationPlan) -> None:
        """Carry out ``plan`` (again, after a crash: steps already done are skipped) and
        start a new, empty file."""
        self.close()
        parent = self.path.parent
        for name, ino in plan.unlink:
            if _ino(parent / name) == ino:
                os.unlink(parent / name)
        for src, dst, ino in plan.renames:
            if _ino(parent / src) == ino:
                os.replace(parent / src, parent / dst)
        fd = os.open(
            self.path,
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o644,
        )
        st = os.fstat(fd)
        if any(st.st_ino == ino for _, _, ino in plan.renames):  # cannot happen: renamed away
            os.close(fd)
            raise OSError(f"node log {self.path} was not rotated")
        os.ftruncate(fd, 0)  # anything here was written after the plan and never committed
        self.fd, self.ino, self.length = fd, st.st_ino, 0
        self.stats = {}
        self.backups = list(plan.backups)


def _ino(path: Path) -> int:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return -1
