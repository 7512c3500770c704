"""The node log's line grammar: one record dict in, NVRx's text line(s) out.

One record becomes (one line)::

    <local time YYYY-MM-DD HH:MM:SS,mmm> [<LEVEL>] [<node id>]
    [workload:<r>(<lr>) infra:<r>(<lr>)] <file>:<line> <message>

``?`` stands for an unknown rank; `` [trace_id=<32 hex> span_id=<16 hex>]`` follows when
the record was written inside a span, and `` [repeated <N>x across ranks <ranges>]`` ends
the line of a record the aggregator's de-duplication window collapsed (its
``nv.nvrx.dedup.*`` attributes; ``nvrx-otel logs`` writes the same words for its own view).
Further lines of the message and the exception text follow, each indented by four spaces,
so none reads as a record. Control characters other than tab are written as ``\\xNN`` (no
ANSI escape reaches the file raw), and the line and paragraph separators U+2028 and U+2029
as ``\\u2028`` and ``\\u2029`` (readers that split lines on them would otherwise see a
record broken in two).

Both the aggregator's node log and the logging front end's stream and file modes write
this grammar, so it sits below both and imports only the standard library (and the
generated attribute keys of ``semconv``, for the repeat note).
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable
from operator import itemgetter
from typing import Any, Final

from nvrx_otel.semconv import DEDUP_COUNT, DEDUP_RANKS

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


def ranks_phrase(ranks: Collection[int]) -> str:
    """``rank 3`` or ``ranks 0-2,5``."""
    return f"rank{'s' if len(ranks) != 1 else ''} {ranges(ranks)}"


def ranges(numbers: Iterable[int]) -> str:
    """``0-3,7``: sorted numbers with runs written as ranges."""
    out: list[str] = []
    run_start = run_end = None
    for n in sorted(numbers):
        if run_end is not None and n == run_end + 1:
            run_end = n
            continue
        if run_start is not None:
            out.append(f"{run_start}" if run_start == run_end else f"{run_start}-{run_end}")
        run_start = run_end = n
    if run_start is not None:
        out.append(f"{run_start}" if run_start == run_end else f"{run_start}-{run_end}")
    return ",".join(out)


def parse_ranges(text: str) -> list[int]:
    """The numbers of a :func:`ranges` text (``ValueError`` when it is not one)."""
    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        first = int(lo)
        last = int(hi) if dash else first
        if last < first or last - first > 1 << 20:
            raise ValueError(f"not a range of ranks: {part!r}")
        out.extend(range(first, last + 1))
    return out


def repeat_note(attrs: Any) -> str:
    """`` [repeated <N>x across ranks <ranges>]`` for the attributes of a record the
    aggregator collapsed (``nv.nvrx.dedup.count`` and ``.ranks``); empty for any other."""
    if not isinstance(attrs, dict):
        return ""
    count = attrs.get(DEDUP_COUNT)
    if count is None:
        return ""
    return repeated(count, attrs.get(DEDUP_RANKS, "?"))


def repeated(count: Any, ranks: str) -> str:
    """`` [repeated <count>x across ranks <ranks>]``: the words every reader of a collapsed
    record shows (the node log's line, the report's failure)."""
    return f" [repeated {count}x across ranks {ranks}]"


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
    if "attrs" in record:
        head += repeat_note(record["attrs"])
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
    if not file:  # absent, null or empty: the path's base name, as the fast paths take it
        path = record.get("path")
        if isinstance(path, str):
            return source_file(path)
        if file is None:
            return "?"
    return str(file)


def format_record(record: dict[str, Any], node_id: str) -> str:
    """The node-log text of one record (a ``record.LogRecord`` dict): its line, any
    continuation lines, and the final ``\\n``. Never raises, whatever the fields hold."""
    return format_records((record,), escape(node_id))


def format_records(records: Iterable[dict[str, Any]], node: str) -> str:
    """The node-log text of many records (``node`` already escaped), equal to joining
    :func:`format_record` of each; checks every record for what needs care."""
    return _joined(record_texts(records, node))


def _joined(texts: list[str]) -> str:
    """Record texts (:func:`record_texts`) as node-log text: each ended by a newline."""
    if not texts:
        return ""
    texts.append("")
    text = "\n".join(texts)
    texts.pop()
    return text


def record_texts(records: Iterable[dict[str, Any]], node: str) -> list[str]:
    """Each record's node-log text without its final newline (its line and any
    continuation lines), checking every record for what needs care."""
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
            if "attrs" in d:
                line += repeat_note(d["attrs"])
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
    return out


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
    return _joined(clean_record_texts(records, node))


def clean_record_texts(records: list[dict[str, Any]], node: str) -> list[str]:
    """:func:`record_texts` for records known to be clean (see
    :func:`format_clean_records`).

    The middle of a line, ``[<LEVEL>] [<node>] [<ranks>] <file>:<line> ``, is made once per
    call site (level, ranks, path and line, fetched by one ``itemgetter``) and looked up
    for the other records of the site; a record without one of those fields, with a
    ``file``, or with a rank that is not an ``int`` (``1.0`` and ``true`` are keys equal to
    ``1`` but are shown as written), has it made on its own."""
    out: list[str] = []
    append = out.append
    stamps = _STAMPS
    millis = _MILLIS
    site_of = _SITE
    sites: dict[tuple[Any, ...], str] = {}
    last_sec = -1
    stamp = ""
    try:
        for d in records:
            ts = d["ts"]
            sec = ts // _NS
            if sec != last_sec:
                stamp = stamps.get(sec) or _stamp(sec)
                last_sec = sec
            if "exc" in d:
                raise _NotClean
            try:
                site = site_of(d)
            except KeyError:  # a field left out (an unknown rank): this record's own
                site = None
            if (
                site is None
                or "file" in d
                # equal is not enough: 1, 1.0 and true are equal keys but different texts
                or not type(site[1]) is type(site[2]) is type(site[3]) is type(site[4]) is int
            ):
                g = d.get
                block = _rank_block(node, g("rank"), g("lrank"), g("irank"), g("ilrank"))
                file = d.get("file") or source_file(d["path"])
                middle = f"[{d['lvl']}] {block} {file}:{d['line']} "
            else:
                made = sites.get(site)
                if made is None:
                    block = _rank_block(node, *site[1:5])
                    made = sites[site] = f"[{site[0]}] {block} {source_file(site[5])}:{site[6]} "
                middle = made
            line = f"{stamp},{millis[ts // _MS % 1000]} {middle}{d['msg']}"
            if "trace_id" in d:
                line = f"{line} [trace_id={d['trace_id']} span_id={d.get('span_id', '?')}]"
            if "attrs" in d:
                line += repeat_note(d["attrs"])
            append(line)
    except Exception:  # an exception text, a missing or odd field: the careful path
        return record_texts(records, node)
    return out


_SITE: Final = itemgetter("lvl", "rank", "lrank", "irank", "ilrank", "path", "line")
"""A record's call site as the node log shows it (the file is the path's base name)."""
_MILLIS: Final = tuple(f"{ms:03d}" for ms in range(1000))


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
