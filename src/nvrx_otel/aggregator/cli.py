"""Command line of the aggregator: ``python -m nvrx_otel.logging.aggregator`` and
``nvrx-otel aggregate`` (NVRx's flags, plus ``--spool-dir``, ``--drain-timeout``,
``--job-id`` and ``--nice``)."""

from __future__ import annotations

import argparse
import logging
import math
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from nvrx_otel import env, envparse
from nvrx_otel.aggregator.health import own_stderr, say, set_prefix
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig, AggregatorError
from nvrx_otel.proctime import process_start_ns

DEFAULT_PROG = "python -m nvrx_otel.logging.aggregator"
SWITCH_INTERVAL_S = 0.0005
"""The GIL's switch interval in the aggregator's own process (see :func:`main`)."""


def _seconds(*, allow_zero: bool) -> type[float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise argparse.ArgumentTypeError(f"expected a number of seconds {bound}, got {text!r}")
        return value

    parse.__name__ = "seconds"
    return parse  # type: ignore[return-value]


def _niceness(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 19, got {text!r}")
    return value


def _job_id(text: str) -> str:
    try:
        return env.parse_text("--job-id", text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected non-empty text without control characters, got {text!r}"
        ) from None


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line with the run's prefix, like every other line of a run
    (``--help`` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        say(f"error: {message} (see {self.prog} --help)")
        self.exit(2)


def build_parser(prog: str = DEFAULT_PROG) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        description=(
            "Node-local log aggregator: writes the records every process of this node spools "
            "to <log dir>/nvrx_log_<node id>.log, exactly once, and exits when the wait file "
            "appears (after draining)."
        ),
        epilog=(
            "example (one per node, before the ranks start; see docs/node-log.md):\n"
            "  export NVRX_NODE_LOCAL_TMPDIR=/tmp/nvrx\n"
            f"  {prog} --log-dir logs --wait-file done --job-id run1 &\n"
            "  torchrun --nproc-per-node 8 --rdzv-id run1 train.py\n"
            "  touch done && wait"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-dir", required=True, type=Path, help="directory of the node log (created)"
    )
    parser.add_argument(
        "--wait-file",
        required=True,
        type=Path,
        help="once this file appears (one older than the aggregator is ignored), drain and exit",
    )
    parser.add_argument(
        "--en-chronological-ordering",
        action="store_true",
        help="write the records of all ranks in timestamp order (within NVRX_OTEL_HOLD_WINDOW_MS)",
    )
    parser.add_argument(
        "--dedup-window",
        type=_window_ms,
        default=0,
        metavar="MS",
        help="collapse identical records (same level, logger, call site, message) of many "
        "ranks read within MS milliseconds into one record carrying the count and the ranks "
        "(default: 0, off; see docs/dedup.md)",
    )
    parser.add_argument(
        "--check-interval",
        type=_seconds(allow_zero=False),
        default=1.0,
        metavar="SECONDS",
        help="how often to look for new records and the wait file (default: 1.0)",
    )
    parser.add_argument(
        "--spool-dir",
        type=Path,
        metavar="DIR",
        help=f"spool root (default: ${env.NVRX_NODE_LOCAL_TMPDIR})",
    )
    parser.add_argument(
        "--drain-timeout",
        type=_seconds(allow_zero=True),
        default=20.0,
        metavar="SECONDS",
        help="after the wait file or SIGTERM, how long to wait for writers to finish (default: 20)",
    )
    parser.add_argument(
        "--job-id",
        type=_job_id,
        help="the job whose spool directory to aggregate (default: from the environment)",
    )
    parser.add_argument(
        "--nice",
        type=_niceness,
        default=10,
        help="how much to lower the aggregator's CPU priority, 0-19 (default: 10)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        type=_url,
        metavar="URL",
        help="export logs, spans and health metrics over OTLP to this base URL "
        "(like OTEL_EXPORTER_OTLP_ENDPOINT, which it overrides; default: OTLP is on only "
        "when an OTEL_EXPORTER_OTLP_*ENDPOINT variable is set)",
    )
    parser.add_argument(
        "--otlp-json",
        type=Path,
        metavar="DIR",
        help="also write logs and spans as OTLP/JSON lines (the collector file exporter's "
        "shape) to DIR/logs_<node>.jsonl and DIR/traces_<node>.jsonl",
    )
    return parser


def _window_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or value > 3_600_000:
        raise argparse.ArgumentTypeError(f"expected milliseconds, 0-3600000, got {text!r}")
    return value


def _dedup_note(window_ms: int) -> str:
    return f", collapsing identical records within {window_ms} ms" if window_ms else ""


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text.split("://", 1)[1]) == 0:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def main(argv: Sequence[str] | None = None, *, prog: str = DEFAULT_PROG) -> int:
    """Run the aggregator; returns the exit code (2 for bad arguments, 1 when it cannot run
    or could not write the node log or commit its progress: records stayed undelivered)."""
    own_stderr()  # this process is the aggregator's: a broken stderr pipe is silenced
    _one_voice(prog)
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        raw = env.spool_root(args.spool_dir, strict=True)
    except ValueError as exc:
        parser.error(str(exc))
    if raw is None:
        parser.error(f"no spool directory: pass --spool-dir or set {env.NVRX_NODE_LOCAL_TMPDIR}")
    spool_root = Path(raw)
    try:
        config = AggregatorConfig.from_env(
            strict=True,
            log_dir=args.log_dir,
            spool_root=spool_root,
            wait_file=args.wait_file,
            since_ns=process_start_ns(),  # this process is the aggregator's (see WaitFile)
            job_id=args.job_id,
            chrono=args.en_chronological_ordering,
            dedup_window_ms=args.dedup_window,
            check_interval=args.check_interval,
            drain_timeout=args.drain_timeout,
            nice=args.nice,
            otlp_endpoint=args.otlp_endpoint,
            otlp_json=args.otlp_json,
        )
        aggregator = Aggregator(config)
        aggregator.open()
    except ValueError as exc:  # a malformed variable: one line naming it and its value
        say(f"error: {exc}")
        return 2
    except AggregatorError as exc:
        say(f"error: {exc}")
        return 1
    say(
        f"aggregating {aggregator.job_dir} into {aggregator.log_path}"
        f"{' in chronological order' if config.chrono else ''}"
        f"{_dedup_note(config.dedup_window_ms)}; waiting for {config.wait_file}"
    )
    # This process's busy threads, the loop and an OTLP sink's, hand the GIL to each other
    # at every send and receive of the sink: waiting the default 5 ms for it each time, the
    # sink falls behind a catch-up and must read the spool again. 0.5 ms keeps it along.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return aggregator.run(install_signals=True)


class _SayHandler(logging.Handler):
    """Library log records (the OTel SDK's exporters, urllib3) as the run's lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            say(self.format(record))
        except Exception:  # never raises, as say itself
            pass


def _one_voice(prog: str) -> None:
    """Every line this process writes to stderr starts with ``prog: ``: its own, the
    one-time warnings of the settings, library log records, Python warnings and uncaught
    exceptions of any thread."""
    set_prefix(prog)
    envparse.say_warnings_with(say)
    handler = _SayHandler(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.root.addHandler(handler)

    def show_warning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        say(f"{category.__name__}: {message} ({filename}:{lineno})")

    warnings.showwarning = show_warning

    def uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        say("".join(traceback.format_exception(kind, exc, tb)))

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "a thread"
        text = "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
        )
        say(f"uncaught in {name}:\n{text}")

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread
