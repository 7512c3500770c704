"""``nvrx-otel report``: the arguments, the one pass, the outputs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final

from nvrx_otel import command
from nvrx_otel.report import failures, silence, stragglers
from nvrx_otel.report.analyse import analyse_timeline
from nvrx_otel.view.cli import quiet_stdout
from nvrx_otel.view.files import PathError
from nvrx_otel.view.read import Problems

PROG: Final = "nvrx-otel report"
EPILOG: Final = """\
examples:
  nvrx-otel report otlp/                                # the aggregators' --otlp-json DIR
  nvrx-otel report otlp/ --perfetto job.json --png job.png --html job.html
  nvrx-otel report gateway-out/logs.jsonl gateway-out/traces.jsonl --json

A directory gives its logs*.jsonl and traces*.jsonl (with the collector's rotated
backups). Definitions and thresholds: docs/report.md.
"""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="OTLP JSON file, directory or glob")
    p.add_argument("--perfetto", metavar="OUT.json", help="write a Chrome trace-event JSON")
    p.add_argument("--png", metavar="OUT.png", help="draw the per-rank timeline (needs [plot])")
    p.add_argument("--html", metavar="OUT.html", help="write one self-contained HTML page")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--job",
        metavar="ID",
        help="report this job only (its nv.nvrx.job.id); needed when the files hold several",
    )
    p.add_argument(
        "--straggler-ratio",
        type=_positive,
        default=stragglers.RATIO,
        metavar="X",
        help=f"straggler: mean phase duration over X times the ranks' median "
        f"(default {stragglers.RATIO:g})",
    )
    p.add_argument(
        "--silence",
        type=_positive,
        default=silence.MIN_S,
        metavar="S",
        help=f"silent: at least S seconds behind the others (default {silence.MIN_S:g})",
    )
    p.add_argument(
        "--skew",
        type=_positive,
        default=failures.SKEW_S,
        metavar="S",
        help=f"assumed clock skew between nodes, seconds (default {failures.SKEW_S:g})",
    )


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


DESCRIPTION: Final = (
    "What happened to a job, from its OTLP JSON files: per phase p50/p99/max durations "
    "across ranks, stragglers, the first failing rank (by time and by trace) with its last "
    "log lines, ranks that went silent while the others went on, restart cycles and their "
    "time to recover."
)


def register(sub: Any) -> None:
    """Add ``report`` to the ``nvrx-otel`` subcommands."""
    p = sub.add_parser(
        "report",
        help="Summarise a job from its OTLP JSON logs and traces.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)


def _error(text: str) -> int:
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run ``nvrx-otel report`` with parsed arguments."""
    if args.png or args.html:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if args.png:
                return _error(f"--png needs matplotlib: {sys.executable} -m pip install matplotlib")
    sinks = []
    perfetto_out = None
    writer = None
    problems = Problems(prog=PROG, what="valid OTLP JSON request")
    try:
        if args.perfetto:
            from nvrx_otel.report.perfetto import PerfettoWriter

            try:
                perfetto_out = open(args.perfetto, "wb")  # noqa: SIM115  (closed below)
            except OSError as exc:
                return _error(f"{args.perfetto}: {exc.strerror or exc}")
            writer = PerfettoWriter(perfetto_out)
            sinks.append(writer)
        try:
            report, timeline = analyse_timeline(
                list(args.paths),
                straggler_ratio=args.straggler_ratio,
                silence_min_s=args.silence,
                skew_s=args.skew,
                sinks=sinks,
                problems=problems,
                job=args.job,
            )
        except PathError as exc:
            return _error(str(exc))
        if args.job is None and len(report.jobs) > 1:
            found = ", ".join(report.jobs)
            return _error(
                f"the records are of {len(report.jobs)} jobs ({found}): report one with "
                f"--job, e.g. {command.line('report', *args.paths, '--job', report.jobs[0])}"
            )
        if args.job is not None and args.job not in report.jobs:
            found = ", ".join(report.jobs) or "none"
            return _error(f"no records of job {args.job!r}; the jobs found: {found}")
        if writer is not None:
            writer.close()
    finally:
        if perfetto_out is not None:
            perfetto_out.close()
        problems.summary()
    try:
        if args.png:
            from nvrx_otel.report.png import draw

            draw(report, timeline, args.png)
        if args.html:
            from nvrx_otel.report.html import page

            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(page(report, timeline))
    except OSError as exc:
        return _error(f"{exc.filename or ''}: {exc.strerror or exc}")
    from nvrx_otel.report.render import json_text, write_text

    try:
        if args.json:
            sys.stdout.write(json_text(report))
        else:
            write_text(report, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has seen enough
        quiet_stdout()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``nvrx-otel report ARGS`` (``argv`` without the command's name); the exit status."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)
