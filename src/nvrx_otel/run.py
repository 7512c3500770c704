"""``nvrx-otel run -- COMMAND…``: one command that runs a job on this node with its
telemetry — the node's aggregator started before the command and drained after it, the
ranks and the aggregator agreeing on one job id, the verdict printed at the end.

What it does, in order:

1. picks the job id (``--job-id``, else ``NVRX_OTEL_JOB_ID``, else the launcher's —
   Slurm's — id, else torchrun's ``--rdzv-id`` in the command, else a new one) and sets
   ``NVRX_OTEL_JOB_ID`` for the command, so that a launcher's random id (``torchrun
   --standalone``) cannot part the ranks from their aggregator;
2. sets the spool root (``NVRX_NODE_LOCAL_TMPDIR``) when none is set, to a directory of
   this user's under the system's temporary directory (node-local);
3. sets ``OTEL_SERVICE_NAME`` when nothing names the service: ``--service-name``, else the
   command's script;
4. starts ``nvrx-otel aggregate`` in its own session (a Ctrl-C is the command's; the
   aggregator is drained after it) writing ``DIR/logs/nvrx_log_<node>.log`` and
   ``DIR/otlp/{logs,traces}_<node>.jsonl``;
5. runs the command, passing on SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 (and SIGINT, SIGQUIT
   unless they came from the terminal, which sent them to the command itself);
6. when it ends, drains the aggregator (``--drain-timeout``), prints the verdict of
   ``nvrx-otel report`` and the commands that show more, and exits with the command's
   exit status (128 + N for a command killed by signal N).

Under ``srun`` it runs once per node (``srun --ntasks-per-node 1 nvrx-otel run --
torchrun …``): every node writes its own files into the shared ``DIR``; the first node
(``SLURM_NODEID`` 0) prints the verdict of what its own aggregator read.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

from nvrx_otel import command, env
from nvrx_otel.identity import resolve

PROG: Final = "nvrx-otel run"

DRAIN_TIMEOUT_S: Final = 20.0
"""The aggregator's ``--drain-timeout`` unless given: how long it waits for writers that
outlive the command (orphaned children) before it reports what they left."""

STOP_GRACE_S: Final = 15.0
"""How long past its drain timeout the aggregator may take before it is sent SIGTERM
(and as long again before SIGKILL)."""

FORWARDED: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
FROM_TERMINAL: Final = (signal.SIGINT, signal.SIGQUIT)
"""Passed on only when not sent by the terminal: the terminal sends them to its whole
foreground process group, the command included, and torchrun takes a second SIGINT as
"stop now"."""

_RDZV_ID: Final = re.compile(r"--rdzv[-_]id(?:=(?P<value>.*))?")

DESCRIPTION: Final = (
    "Run a job's command on this node with its telemetry: start this node's aggregator, "
    "set the job id, spool root and service name for the command's processes, run it, "
    "drain, print the verdict, exit with the command's exit status."
)
EPILOG: Final = """\
examples (see docs/launchers.md):
  nvrx-otel run -- torchrun --nproc-per-node 8 train.py
  nvrx-otel run --out runs/exp1 -- torchrun --standalone --nproc-per-node 8 train.py
  srun --ntasks-per-node 1 nvrx-otel run --out runs/$SLURM_JOB_ID -- torchrun ... train.py
"""


@dataclass(frozen=True)
class Setup:
    """What the run decided before it starts anything."""

    job_id: str
    job_source: str
    out: Path
    node: str
    spool_root: Path
    environ: dict[str, str]

    @property
    def log_dir(self) -> Path:
        return self.out / "logs"

    @property
    def otlp_dir(self) -> Path:
        return self.out / "otlp"

    @property
    def aggregator_stderr(self) -> Path:
        return self.out / f"aggregator-{self.node}.txt"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where the node logs (DIR/logs) and OTLP JSON (DIR/otlp) go "
        "(default: nvrx-runs/<job id>)",
    )
    p.add_argument("--job-id", help="the job id (default: the launcher's, else a new one)")
    p.add_argument(
        "--service-name",
        help="OTEL_SERVICE_NAME for the command (default: its script's name, unless set)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=DRAIN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long the aggregator waits for writers that outlive the command "
        f"(default {DRAIN_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also export over OTLP to this base URL (as the aggregator's flag)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the job's command")


def register(sub: Any) -> None:
    """Add ``run`` to the ``nvrx-otel`` subcommands."""
    p = sub.add_parser(
        "run",
        help="Run a job's command with this node's aggregator; print the verdict.",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=main)


def _say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def _rdzv_id(cmd: Sequence[str]) -> str | None:
    """torchrun's ``--rdzv-id`` (``--rdzv_id``) in the command, if it is torchrun's."""
    for i, word in enumerate(cmd):
        m = _RDZV_ID.fullmatch(word)
        if m is None:
            continue
        if m["value"] is not None:
            return m["value"] or None
        return cmd[i + 1] if i + 1 < len(cmd) else None
    return None


def _job_id(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, str]:
    """The job id and where it came from."""
    if args.job_id:
        return args.job_id, "--job-id"
    explicit = environ.get(env.NVRX_OTEL_JOB_ID, "").strip()
    if explicit:
        return explicit, env.NVRX_OTEL_JOB_ID
    launcher = resolve(environ).job_id
    if launcher:
        return launcher, "the launcher"
    rdzv = _rdzv_id(args.cmd)
    if rdzv and rdzv != "none":
        return rdzv, "torchrun --rdzv-id"
    return time.strftime("run-%Y%m%d-%H%M%S-") + str(os.getpid()), "new"


def _script(cmd: Sequence[str]) -> str:
    """A service name from the command: its first ``*.py`` word, else its program."""
    for word in cmd:
        if word.endswith(".py"):
            return Path(word).stem
    return Path(cmd[0]).name


def _service_named(environ: Mapping[str, str]) -> bool:
    if environ.get(env.OTEL_SERVICE_NAME, "").strip():
        return True
    attributes = environ.get(env.OTEL_RESOURCE_ATTRIBUTES, "")
    return any(part.split("=", 1)[0].strip() == "service.name" for part in attributes.split(","))


def prepare(args: argparse.Namespace, environ: Mapping[str, str]) -> Setup:
    """Decide the job id, directories and the command's environment."""
    job_id, source = _job_id(args, environ)
    if "/" in job_id or job_id in (".", ".."):
        raise ValueError(f"the job id {job_id!r} ({source}) cannot name a directory")
    out = Path(args.out) if args.out else Path("nvrx-runs") / job_id
    child = dict(environ)
    child[env.NVRX_OTEL_JOB_ID] = job_id
    root = env.SPOOL_ROOT.get(environ)
    spool_root = Path(root) if root else Path(tempfile.gettempdir()) / f"nvrx-otel-{os.getuid()}"
    child[env.NVRX_NODE_LOCAL_TMPDIR] = str(spool_root)
    if not _service_named(environ):
        child[env.OTEL_SERVICE_NAME] = args.service_name or _script(args.cmd)
    elif args.service_name:
        child[env.OTEL_SERVICE_NAME] = args.service_name
    node = resolve(child).node_id or "node"
    return Setup(job_id, source, out, node, spool_root, child)


def _aggregator(setup: Setup, args: argparse.Namespace, wait_file: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "nvrx_otel", "aggregate",
        "--log-dir", str(setup.log_dir),
        "--wait-file", str(wait_file),
        "--spool-dir", str(setup.spool_root),
        "--job-id", setup.job_id,
        "--otlp-json", str(setup.otlp_dir),
        "--drain-timeout", str(args.drain_timeout),
    ]  # fmt: skip
    if args.otlp_endpoint:
        cmd += ["--otlp-endpoint", args.otlp_endpoint]
    with setup.aggregator_stderr.open("ab") as err:
        return subprocess.Popen(
            cmd,
            env=setup.environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # a Ctrl-C is the command's; this one is drained after
        )


def _from_terminal() -> bool:
    """Whether this process is in the terminal's foreground group (so a terminal's
    SIGINT reached the command too)."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class _Forward:
    """Signal handlers that pass signals on to the command while it runs."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.previous: dict[int, Any] = {}
        self.received: list[int] = []

    def __enter__(self) -> _Forward:
        for sig in (*FORWARDED, *FROM_TERMINAL):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        child = self.child
        if child is None or child.poll() is not None:
            return
        if signum in FROM_TERMINAL and _from_terminal():
            return  # the terminal sent it to the command as well
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass


def _run_command(setup: Setup, cmd: list[str]) -> int:
    """Run the command; its exit status (128 + N for signal N, 127 when it cannot start)."""
    with _Forward() as forward:
        try:
            child = subprocess.Popen(cmd, env=setup.environ)
        except OSError as exc:
            _say(f"cannot run {cmd[0]!r}: {exc.strerror or exc}")
            return 127 if isinstance(exc, FileNotFoundError) else 126
        forward.child = child
        code = child.wait()  # SIGINT is handled above: no KeyboardInterrupt here
    return 128 - code if code < 0 else code


def _drain(proc: subprocess.Popen[bytes], wait_file: Path, timeout: float) -> int | None:
    """Tell the aggregator to drain and wait for it; its exit status (None: it had to be
    killed)."""
    try:
        wait_file.touch()
    except OSError as exc:
        _say(f"cannot make the wait file {wait_file}: {exc.strerror}; stopping the aggregator")
        proc.terminate()
    for stop in (None, proc.terminate, proc.kill):
        if stop is not None:
            stop()
        try:
            return proc.wait(timeout=timeout + STOP_GRACE_S if stop is None else STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    return None


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(its stderr could not be read)"
    return lines[-1] if lines else "(nothing on stderr)"


def _verdict(setup: Setup, code: int) -> str | None:
    """The report's verdict of what this node's aggregator wrote (None: nothing to read),
    weighed against the command's exit status: a command that failed is never "OK"."""
    from nvrx_otel.report.analyse import analyse_timeline
    from nvrx_otel.report.verdict import verdict
    from nvrx_otel.view.files import PathError
    from nvrx_otel.view.read import Problems

    try:
        report, _ = analyse_timeline(
            [str(setup.otlp_dir)],
            problems=Problems(prog=PROG, what="valid OTLP JSON request"),
            job=setup.job_id,
        )
    except PathError:
        return None
    text = verdict(report)
    if code != 0 and text.startswith("OK"):
        n = f"{report.logs} record{'s' if report.logs != 1 else ''}"
        return (
            f"FAILED: the command exited {code}, and no rank recorded a failure (the errors "
            f"of processes without a rank are in the logs). {n} read."
        )
    return text


def _first_node(environ: Mapping[str, str]) -> bool:
    return environ.get(env.SLURM_NODEID, "0").strip() in ("", "0")


def main(args: argparse.Namespace) -> int:
    """Run ``nvrx-otel run`` with parsed arguments; the command's exit status (2 for a
    usage error, before anything ran)."""
    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    args.cmd = cmd
    if not cmd:
        _say("error: no command: nvrx-otel run [options] -- COMMAND [ARGS...]")
        return 2
    if not args.drain_timeout > 0:
        _say(f"error: --drain-timeout must be more than 0, got {args.drain_timeout:g}")
        return 2
    try:
        setup = prepare(args, os.environ)
        setup.out.mkdir(parents=True, exist_ok=True)
        setup.spool_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except ValueError as exc:
        _say(f"error: {exc}")
        return 2
    except OSError as exc:
        _say(f"error: {exc.filename}: {exc.strerror}")
        return 2
    wait_file = setup.spool_root / f".nvrx-run-done-{setup.job_id}-{os.getpid()}"
    wait_file.unlink(missing_ok=True)
    _say(f"job {setup.job_id} ({setup.job_source}); the node log and OTLP JSON go to {setup.out}")
    aggregator = _aggregator(setup, args, wait_file)
    try:
        code = _run_command(setup, cmd)
    finally:
        agg_code = _drain(aggregator, wait_file, args.drain_timeout)
        wait_file.unlink(missing_ok=True)
    if agg_code != 0:
        state = "had to be killed" if agg_code is None else f"exited {agg_code}"
        _say(f"the aggregator {state}: {_tail(setup.aggregator_stderr)}")
        _say(f"its stderr: {setup.aggregator_stderr}")
    if _first_node(os.environ):
        _print_end(setup, code)
    return code


def _print_end(setup: Setup, code: int) -> None:
    try:
        text = _verdict(setup, code)
    except Exception as exc:  # the job's status stands whatever the report does
        text = None
        _say(f"the report failed: {type(exc).__name__}: {exc}")
    nodes = os.environ.get(env.SLURM_NNODES, "1").strip()
    whose = f" (node {setup.node}'s records)" if nodes not in ("", "1") else ""
    if text is not None:
        _say(f"verdict{whose}: {text}")
    _say(f"the command exited {code}")
    html = str(setup.out / "report.html")
    _say(f"the report: {command.line('report', str(setup.out), '--html', html)}")
    _say(f"the logs:   {command.line('logs', str(setup.out))}")
