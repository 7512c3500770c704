"""``nvrx-otel logs``: the arguments and the loop that reads, merges, filters, collapses
and writes."""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from nvrx_otel.view import filters as flt
from nvrx_otel.view.dedup import WINDOW_NS, Dedup, Group
from nvrx_otel.view.entry import Entry
from nvrx_otel.view.files import PathError, find_streams
from nvrx_otel.view.merge import merge
from nvrx_otel.view.read import Problems, StreamReader
from nvrx_otel.view.render import PlainWriter, RichWriter, json_line, plain

POLL_S: Final = 0.25
"""How often ``--follow`` looks for appended lines."""

EPILOG: Final = """\
examples:
  nvrx-otel logs logs/1234/                       # every node of job 1234, in time order
  nvrx-otel logs logs/1234/ --rank 0-3,7 --level warning --since 10m  # 10 min ago
  nvrx-otel logs 'logs/*/nvrx_log_node00*.log' otlp/logs_node001.jsonl --trace 4bf92f35
  nvrx-otel logs logs/1234/ --follow              # and what the aggregators write next

Node-log times are the node's local time as written; they are read (and --since/--until
without an offset are taken) in this machine's local time zone (TZ). Identical messages
(same level and text) within 2 s of the first collapse into one line ending in
"[repeated <N>x across ranks <list>]"; --no-dedup shows each record.
"""


def _arg(parse: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = what
    return convert


def register(sub: Any) -> None:
    """Add ``logs`` to the ``nvrx-otel`` subcommands."""
    p = sub.add_parser(
        "logs",
        help=cmd_logs.__doc__,
        description="One chronological view of node logs (nvrx_log_<node>.log, with their "
        "rotated backups) and OTLP JSON log files (the aggregator's --otlp-json "
        "logs_<node>.jsonl, the collector's logs.jsonl and its backups).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="file, directory or glob")
    p.add_argument(
        "--rank",
        type=_arg(flt.parse_ranks, "ranks"),
        metavar="R",
        help="workload ranks (the launcher's RANK), e.g. 0-3,7",
    )
    p.add_argument(
        "--infra-rank",
        type=_arg(flt.parse_ranks, "ranks"),
        metavar="R",
        help="infrastructure ranks (infra:), e.g. 0-3,7",
    )
    p.add_argument(
        "--node",
        action="append",
        metavar="N",
        help="node ids or glob patterns, comma-separated; may be repeated",
    )
    p.add_argument(
        "--level",
        type=_arg(flt.parse_level, "level"),
        metavar="L",
        default=0,
        help="minimum level: trace, debug, info, success, warning, error, "
        "critical (or an OTel severity number)",
    )
    p.add_argument(
        "--trace",
        type=_arg(flt.parse_trace, "trace id"),
        metavar="ID",
        help="trace id (or a prefix of one)",
    )
    p.add_argument(
        "--since",
        type=_arg(flt.parse_time, "time"),
        metavar="T",
        help="from this time on: ISO 8601 or that long ago (10m, 2h, 1d; or --since=-10m)",
    )
    p.add_argument(
        "--until",
        type=_arg(flt.parse_time, "time"),
        metavar="T",
        help="up to this time: ISO 8601 or that long ago",
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep showing what is appended (rotations followed)",
    )
    p.add_argument(
        "--dedup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="collapse identical messages within 2 s (default: on)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.set_defaults(func=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    """Show node logs and OTLP JSON logs as one chronological view."""
    nodes = None
    if args.node:
        nodes = tuple(n.strip() for arg in args.node for n in arg.split(",") if n.strip())
    keep = flt.Filters(
        ranks=args.rank,
        infra_ranks=args.infra_rank,
        nodes=nodes,
        min_severity=args.level,
        trace=args.trace,
        since_ns=args.since,
        until_ns=args.until,
    )
    try:
        streams = find_streams(list(args.paths))
    except PathError as exc:
        print(f"nvrx-otel logs: error: {exc}", file=sys.stderr)
        return 2
    problems = Problems()
    readers = [StreamReader(s, problems) for s in streams]
    if args.json:
        write: Any = PlainWriter(sys.stdout, json_line)
    elif sys.stdout.isatty():
        write = RichWriter(sys.stdout)
    else:
        write = PlainWriter(sys.stdout, plain)
    try:
        show(readers, keep, write, dedup=args.dedup, follow=args.follow)
    except BrokenPipeError:  # `| head`: the reader has seen enough
        quiet_stdout()
    except KeyboardInterrupt:
        return 130
    finally:
        for r in readers:
            r.close()
        problems.summary()
    return 0


def quiet_stdout() -> None:
    """Point stdout at /dev/null (the reader of a pipe left: nothing more to say to it)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _filtered(entries: Iterable[Entry], keep: flt.Filters) -> Iterator[Entry]:
    if not keep.active:
        return iter(entries)
    return (e for e in entries if keep(e))


def show(
    readers: list[StreamReader],
    keep: flt.Filters,
    write: Any,
    *,
    dedup: bool,
    follow: bool,
) -> None:
    """Write every record of ``readers`` that ``keep`` lets through, in time order;
    with ``follow`` go on with what is appended until interrupted."""
    entries = _filtered(merge([r.entries(follow=follow) for r in readers]), keep)
    collapse = Dedup() if dedup else None
    if collapse is None:
        for e in entries:
            write(Group(e))
    else:
        push = collapse.push
        for e in entries:
            for g in push(e):
                write(g)
        if not follow:
            for g in collapse.flush():
                write(g)
    write.flush()
    if follow:
        _follow(readers, keep, write, collapse)


def _ts(e: Entry) -> int:
    return e.ts_ns


def _follow(
    readers: list[StreamReader], keep: flt.Filters, write: Any, collapse: Dedup | None
) -> None:
    idle_since = time.monotonic()
    while True:
        new = list(heapq.merge(*(sorted(r.poll(), key=_ts) for r in readers), key=_ts))
        now = time.monotonic()
        if new:
            idle_since = now
        for e in new:
            if keep.active and not keep(e):
                continue
            if collapse is None:
                write(Group(e))
            else:
                for g in collapse.push(e):
                    write(g)
        if collapse is not None:
            # a group can only grow while records within its window may still come: by
            # the wall clock, or (clocks apart) after a quiet window
            quiet = now - idle_since > WINDOW_NS / 1e9
            for g in collapse.flush(None if quiet else time.time_ns() - WINDOW_NS):
                write(g)
        write.flush()
        time.sleep(POLL_S)
