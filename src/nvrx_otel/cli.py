"""The ``nvrx-otel`` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import orjson

from nvrx_otel import run as run_cli
from nvrx_otel._version import __version__
from nvrx_otel.demo import cli as demo_cli
from nvrx_otel.identity import Identity, resolve
from nvrx_otel.report import cli as report_cli
from nvrx_otel.view import cli as view_cli

if TYPE_CHECKING:
    from rich.console import Console

Command = Callable[[argparse.Namespace], int]


def _console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a pipe: don't truncate names to 80 columns
        console = Console(width=max(console.width, 120))
    return console


def _print_identity(ident: Identity, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(ident.attributes(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
        return
    from rich.table import Table

    table = Table(title="identity of this process")
    table.add_column("attribute")
    table.add_column("value")
    for key, value in ident.attributes().items():
        table.add_row(key, str(value))
    _console().print(table)


def cmd_identity(args: argparse.Namespace) -> int:
    """Print this process's identity as resolved from the environment."""
    _print_identity(resolve(strict=args.strict), as_json=args.json)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run a simulated training job on this machine (see ``nvrx-otel demo --help``)."""
    from nvrx_otel.demo.cli import run

    return run(args)


def cmd_aggregate(args: argparse.Namespace) -> int:
    """Run the node log aggregator (``nvrx-otel aggregate --help`` lists its flags)."""
    from nvrx_otel.aggregator.cli import main as aggregate_main

    return aggregate_main(args.aggregate_args, prog="nvrx-otel aggregate")


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check identity, configuration, spool and OTLP endpoint; exit 1 if records would be lost."""
    from nvrx_otel.doctor import render
    from nvrx_otel.doctor.report import gather

    report = gather(
        dict(os.environ),  # the environment's settings, not this command's own setup calls
        spool_dir=args.spool_dir,
        job_id=args.job_id,
        otlp_endpoint=args.otlp_endpoint,
        timeout=args.timeout,
    )
    if args.json:
        sys.stdout.write(orjson.dumps(render.as_json(report), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
        for line in report.problems:  # the reasons in words too, one line each
            print(f"nvrx-otel doctor: {line}", file=sys.stderr)
    else:
        sys.stdout.write(render.text(report))
    return report.status


def cmd_lnav_install(args: argparse.Namespace) -> int:
    """Install lnav formats for the node log and LogFlow's run file (see its --help)."""
    from nvrx_otel.lnav import main as lnav_main

    return lnav_main(args.lnav_args)


def _seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds > 0 (argparse turns the error into a usage
    error: one line, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvrx-otel",
        description="Rank-aware OpenTelemetry logging and tracing for distributed training.",
    )
    parser.add_argument("--version", action="version", version=f"nvrx-otel {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help=cmd_demo.__doc__,
        description=demo_cli.DESCRIPTION,
        epilog=demo_cli.EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo_cli.add_arguments(demo)
    demo.set_defaults(func=cmd_demo)

    ident = sub.add_parser(
        "identity",
        help=cmd_identity.__doc__,
        description=cmd_identity.__doc__,
        epilog="examples:\n  nvrx-otel identity --json\n"
        "  RANK=abc nvrx-otel identity --strict   # exit 2, naming RANK and its value",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ident.add_argument("--json", action="store_true", help="print JSON attributes")
    ident.add_argument(
        "--strict", action="store_true", help="fail on a malformed variable instead of ignoring it"
    )
    ident.set_defaults(func=cmd_identity)

    doctor = sub.add_parser(
        "doctor",
        help=cmd_doctor.__doc__,
        description=cmd_doctor.__doc__,
        epilog="examples (see docs/doctor.md):\n  nvrx-otel doctor\n"
        "  nvrx-otel doctor --json --otlp-endpoint http://gateway:4318 --timeout 5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--spool-dir", help="the spool root (default: $NVRX_NODE_LOCAL_TMPDIR)")
    doctor.add_argument("--job-id", help="the job whose spool directory to look at")
    doctor.add_argument("--otlp-endpoint", help="OTLP base URL, as the aggregator's flag")
    doctor.add_argument(
        "--timeout",
        type=_seconds,
        default=3.0,
        help="seconds one endpoint's check may take in all (default 3)",
    )
    doctor.set_defaults(func=cmd_doctor)

    # Parsed by the aggregator's own parser: main() hands it everything after the name.
    agg = sub.add_parser("aggregate", help=cmd_aggregate.__doc__, add_help=False)
    agg.set_defaults(func=cmd_aggregate, aggregate_args=[])
    lnav = sub.add_parser("lnav-install", help=cmd_lnav_install.__doc__, add_help=False)
    lnav.set_defaults(func=cmd_lnav_install, lnav_args=[])
    run_cli.register(sub)  # nvrx-otel run
    view_cli.register(sub)  # nvrx-otel logs
    report_cli.register(sub)  # nvrx-otel report
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["aggregate"]:  # its flags are the aggregator's, parsed there
        args = argparse.Namespace(func=cmd_aggregate, aggregate_args=arguments[1:])
        return cmd_aggregate(args)
    if arguments[:1] == ["lnav-install"]:  # parsed by nvrx_otel.lnav's own parser
        return cmd_lnav_install(argparse.Namespace(lnav_args=arguments[1:]))
    args = parser.parse_args(arguments)
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except ValueError as exc:
        print(f"nvrx-otel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
