"""Every environment variable nvrx-otel reads: its name, meaning and default, and the parsers.

Each name is a constant ``NAME: Final = "NAME"`` whose docstring says what the variable
does and its default. The NVRx variables keep NVRx's names, meanings and defaults; new
knobs are ``NVRX_OTEL_<WHAT>``; ``OTEL_*`` variables keep their OpenTelemetry meaning.

A parser turns the text into a value or raises ``ValueError`` naming the variable and the
value. :func:`read` applies one: in strict mode (CLIs, tests) the error propagates; on
setup paths inside training it is printed once to stderr and the default is used, so a
malformed variable never stops a job.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

T = TypeVar("T")

# --- NVRx (names, meanings and defaults kept) --------------------------------------------

NVRX_LOG_DEBUG: Final = "NVRX_LOG_DEBUG"
"""``1``/``true``/``yes``/``on`` selects DEBUG level for the ``"nvrx"`` logger. Default: INFO."""

NVRX_LOG_TO_STDOUT: Final = "NVRX_LOG_TO_STDOUT"
"""``1``/``true``/``yes``/``on``: log to stdout, not stderr, when not spooling. Default: off."""

NVRX_NODE_LOCAL_TMPDIR: Final = "NVRX_NODE_LOCAL_TMPDIR"
"""Node-local spool root; when set, every rank spools records there for the node's
aggregator. Keep it on node-local storage (/tmp, /scratch, NVMe). Default: unset (no spool)."""

NVRX_LOG_MAX_FILE_SIZE_KB: Final = "NVRX_LOG_MAX_FILE_SIZE_KB"
"""Size in KB at which a rank's spool file is rotated. Default: 10240 (10 MB)."""

NVRX_LOG_MAX_LOG_FILES: Final = "NVRX_LOG_MAX_LOG_FILES"
"""Spool files kept per process; with the file size it sets the spool budget. Default: 4."""

# --- nvrx-otel's own knobs ---------------------------------------------------------------

NVRX_OTEL_NODE_ID: Final = "NVRX_OTEL_NODE_ID"
"""Node id used in node-log names and records. Default: the host name. Lets tests and
containers name nodes explicitly."""

NVRX_OTEL_DISABLED: Final = "NVRX_OTEL_DISABLED"
"""``1``/``true``/``yes``/``on`` turns off every nvrx-otel side effect beyond plain
stderr logging (no spool, no tracing, no export). Default: off."""

NVRX_OTEL_NODE_LOG_MAX_MB: Final = "NVRX_OTEL_NODE_LOG_MAX_MB"
"""Size in MB (fractions allowed) at which the aggregator rotates the node log to ``.1``,
``.2``, ... (checked between write batches, so a file may pass it by one batch).
Default: 0 (never rotate)."""

NVRX_OTEL_NODE_LOG_BACKUPS: Final = "NVRX_OTEL_NODE_LOG_BACKUPS"
"""Rotated node-log backups to keep; rotation deletes older ones and reports the records
they held as dropped (reason ``rotation``). 0 keeps none. Default: unset (keep all)."""

NVRX_OTEL_HOLD_WINDOW_MS: Final = "NVRX_OTEL_HOLD_WINDOW_MS"
"""With ``--en-chronological-ordering``: how long (ms) the aggregator holds a record so
that earlier records of other ranks, read later, can still go before it. Default: 2000
(twice the default check interval)."""

NVRX_OTEL_STATUS_INTERVAL_S: Final = "NVRX_OTEL_STATUS_INTERVAL_S"
"""Seconds between the aggregator's status lines on stderr (lag, backlog, records/s,
drops, corrupt records). 0 turns them off; the final summary is always written.
Default: 60."""

NVRX_OTEL_SPOOL_SPANS: Final = "NVRX_OTEL_SPOOL_SPANS"
"""``0``/``false``: with a spool configured, spans still go over OTLP (the SDK path with
``OTEL_TRACES_EXPORTER``) instead of into the spool, for the collector's filelog agent
mode, which reads only logs from the spool files. Default: true (spans are spooled)."""

NVRX_OTEL_SPOOL_BUDGET_MB: Final = "NVRX_OTEL_SPOOL_BUDGET_MB"
"""Spool bytes (MB) one process may hold unconsumed before new records are dropped and
counted. Default: NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB x NVRX_OTEL_SPOOL_SCALE
(160 MB)."""

NVRX_OTEL_COLLECTOR_BIN: Final = "NVRX_OTEL_COLLECTOR_BIN"
"""Path of the built collector binary (``otelcol-nvrx``) the collector tests run. Default:
unset (the tests get it from ``scripts/build-collector.sh``, which builds or reuses it)."""

NVRX_OTEL_COLLECTOR_CACHE: Final = "NVRX_OTEL_COLLECTOR_CACHE"
"""Directory where ``scripts/build-collector.sh`` keeps collector builds and Go's caches.
Default: ``${XDG_CACHE_HOME:-~/.cache}/nvrx-otel/collector``."""

# --- LogFlow (the loguru front end; LogFlow's names, meanings and defaults) ----------------

LOGFLOW_DIR: Final = "LOGFLOW_DIR"
"""Directory of the loguru front end's run files (created if missing). Default: ``./logs``."""
LOGFLOW_SCRIPT_NAME: Final = "LOGFLOW_SCRIPT_NAME"
"""Stem of the run file ``<log dir>/<stem>.log``. Default: the ``__main__`` file's stem
(its folder's name for ``__main__.py``), else ``argv[0]``'s stem, else ``app``."""
LOGFLOW_FILE_LEVEL: Final = "LOGFLOW_FILE_LEVEL"
"""Lowest level written to the run file and, with a spool, to the node log (a loguru level
name, any case, or a number). Default: DEBUG."""
LOGFLOW_CONSOLE_LEVEL: Final = "LOGFLOW_CONSOLE_LEVEL"
"""Lowest level shown on the console (rank 0's main process only). Default: INFO."""
LOGFLOW_ROTATION_ON_STARTUP: Final = "LOGFLOW_ROTATION_ON_STARTUP"
"""``true``/``1``/``t``/``y``/``yes`` (or ``false``/``0``/``f``/``n``/``no``): archive an
existing run file at startup so every run starts a fresh one. Default: true."""
LOGFLOW_STARTUP_ROTATION: Final = "LOGFLOW_STARTUP_ROTATION"
"""The other spelling of LOGFLOW_ROTATION_ON_STARTUP (LogFlow's README uses it); when both
are set they must agree. Default: unset."""
LOGFLOW_RETENTION: Final = "LOGFLOW_RETENTION"
"""Startup archives of this script's run file to keep; 0 keeps none. Default: 5."""
LOGFLOW_ENQUEUE: Final = "LOGFLOW_ENQUEUE"
"""Boolean: the run file is written by loguru's background thread (``enqueue=True``);
records still reach the spool at the call site. Default: false."""
LOGFLOW_EAGER_ENQUEUE: Final = "LOGFLOW_EAGER_ENQUEUE"
"""Boolean, accepted for LogFlow compatibility: LogFlow creates the enqueue queue lazily at
the first child process unless this is true; nvrx-otel always creates it at configure
time, so the value changes nothing. Default: false."""
NVRX_OTEL_LOGURU_DIAGNOSE: Final = "NVRX_OTEL_LOGURU_DIAGNOSE"
"""Boolean: loguru's ``diagnose`` (local variable values, secrets included, written next to
tracebacks in the run file and on the console). Default: false."""
NVRX_OTEL_LOGFLOW_PARENT: Final = "NVRX_OTEL_LOGFLOW_PARENT"
"""Internal: set by the loguru front end in the process that configured it (JSON of its
resolved settings and pid) so spawned children write where their parent does. Not meant to
be set by hand. Default: unset."""
XDG_CONFIG_HOME: Final = "XDG_CONFIG_HOME"
"""Base of the user configuration; the loguru front end reads
``$XDG_CONFIG_HOME/logflow/config.yaml``. Default: ``~/.config``."""
NO_COLOR: Final = "NO_COLOR"
"""Any non-empty value turns console colours off (https://no-color.org). Default: unset
(colour when stderr is a terminal)."""

# --- launchers: rank, size and job identity (read, never written) --------------------------

RANK: Final = "RANK"
"""Global workload rank (torchrun, most launchers)."""
LOCAL_RANK: Final = "LOCAL_RANK"
"""Workload rank on the node (torchrun)."""
WORLD_SIZE: Final = "WORLD_SIZE"
"""Number of workload processes (torchrun)."""
LOCAL_WORLD_SIZE: Final = "LOCAL_WORLD_SIZE"
"""Number of workload processes on the node (torchrun)."""
GROUP_RANK: Final = "GROUP_RANK"
"""Rank of the node's worker group (torchrun)."""
NODE_RANK: Final = "NODE_RANK"
"""Rank of the node (Lightning and some launchers); LogFlow's fallback for GROUP_RANK."""
TORCHELASTIC_RUN_ID: Final = "TORCHELASTIC_RUN_ID"
"""torchrun's run id (the job id when no scheduler id exists)."""
TORCHELASTIC_RESTART_COUNT: Final = "TORCHELASTIC_RESTART_COUNT"
"""How many times torchrun restarted the workers (the restart cycle)."""
OMPI_COMM_WORLD_RANK: Final = "OMPI_COMM_WORLD_RANK"
"""Open MPI global rank."""
OMPI_COMM_WORLD_LOCAL_RANK: Final = "OMPI_COMM_WORLD_LOCAL_RANK"
"""Open MPI rank on the node."""
OMPI_COMM_WORLD_SIZE: Final = "OMPI_COMM_WORLD_SIZE"
"""Open MPI number of processes."""
OMPI_COMM_WORLD_LOCAL_SIZE: Final = "OMPI_COMM_WORLD_LOCAL_SIZE"
"""Open MPI number of processes on the node."""
PMIX_RANK: Final = "PMIX_RANK"
"""PMIx rank (Slurm ``--mpi=pmix``, PRRTE). PMIx exports only the rank and
``PMIX_NAMESPACE`` (plus server contact variables) to the environment: local rank and
sizes are PMIx keys read through the PMIx client library, not environment variables."""
PMIX_NAMESPACE: Final = "PMIX_NAMESPACE"
"""PMIx namespace of the job (informational)."""
PMI_RANK: Final = "PMI_RANK"
"""MPICH/Hydra (PMI-1/2) rank."""
PMI_SIZE: Final = "PMI_SIZE"
"""MPICH/Hydra (PMI-1/2) number of processes."""
MPI_LOCALRANKID: Final = "MPI_LOCALRANKID"
"""MPICH/Hydra rank on the node."""
MPI_LOCALNRANKS: Final = "MPI_LOCALNRANKS"
"""MPICH/Hydra number of processes on the node."""
SLURM_PROCID: Final = "SLURM_PROCID"
"""Slurm task rank (the infrastructure rank)."""
SLURM_LOCALID: Final = "SLURM_LOCALID"
"""Slurm task rank on the node (the infrastructure local rank)."""
SLURM_NNODES: Final = "SLURM_NNODES"
"""Slurm number of nodes in the job step (job-array infra-rank formula)."""
SLURM_JOB_NUM_NODES: Final = "SLURM_JOB_NUM_NODES"
"""Slurm number of nodes in the job (fallback for SLURM_NNODES)."""
SLURM_JOB_ID: Final = "SLURM_JOB_ID"
"""Slurm job id."""
SLURM_ARRAY_JOB_ID: Final = "SLURM_ARRAY_JOB_ID"
"""Slurm job-array master job id."""
SLURM_ARRAY_TASK_ID: Final = "SLURM_ARRAY_TASK_ID"
"""Slurm job-array task id."""

# --- OpenTelemetry (standard meaning) -------------------------------------------------------

OTEL_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
"""``service.name`` of every resource (OpenTelemetry). Default: the SDK's."""
OTEL_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"
"""Extra resource attributes ``k=v,k2=v2`` (OpenTelemetry); identity attributes win."""
OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""Base URL of the OTLP endpoint; for HTTP ``/v1/<signal>`` is appended. Setting it (or a
per-signal ``OTEL_EXPORTER_OTLP_{LOGS,TRACES,METRICS}_ENDPOINT``, used as is) turns the
aggregator's OTLP output on. Default: unset (no OTLP output)."""
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
"""``http/protobuf`` (default) or ``grpc`` (needs the ``grpc`` extra); per-signal variants
``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`` win, as for every option below."""
OTEL_EXPORTER_OTLP_HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
"""Extra request headers ``k=v,k2=v2`` (URL-encoded values). Default: none."""
OTEL_EXPORTER_OTLP_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CERTIFICATE"
"""CA bundle (PEM) to verify the endpoint's TLS certificate. Default: the system's."""
OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
"""Client certificate (PEM) for mutual TLS. Default: none."""
OTEL_EXPORTER_OTLP_CLIENT_KEY: Final = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
"""Client private key (PEM) for mutual TLS. Default: none."""
OTEL_EXPORTER_OTLP_COMPRESSION: Final = "OTEL_EXPORTER_OTLP_COMPRESSION"
"""``gzip`` or ``none`` (default)."""
OTEL_EXPORTER_OTLP_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_TIMEOUT"
"""Timeout of one export request in milliseconds. Default: 10000."""
OTEL_SDK_DISABLED: Final = "OTEL_SDK_DISABLED"
"""``true`` disables the OpenTelemetry SDK (OpenTelemetry)."""
OTEL_TRACES_SAMPLER: Final = "OTEL_TRACES_SAMPLER"
"""Span sampler (OpenTelemetry): ``always_on``, ``always_off``, ``traceidratio``,
``parentbased_always_on``, ``parentbased_always_off``, ``parentbased_traceidratio``; an
unknown name is reported once on stderr. Default: ``parentbased_always_on``."""
OTEL_TRACES_SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
"""Sampling ratio in [0, 1] for the ``*traceidratio`` samplers (OpenTelemetry). Default: 1.0."""
OTEL_TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
"""Comma-separated span exporters without a spool: ``otlp``, ``console``, ``none`` or an
installed exporter entry point (OpenTelemetry); ``none`` also keeps spans out of the spool
(ids still propagate). Default: ``otlp``."""
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
"""OTLP transport for spans, overriding OTEL_EXPORTER_OTLP_PROTOCOL (OpenTelemetry).
Default: unset."""
OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT: Final = "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"
"""Attributes kept per span, more are dropped and counted (OpenTelemetry). Default: 128."""
OTEL_SPAN_EVENT_COUNT_LIMIT: Final = "OTEL_SPAN_EVENT_COUNT_LIMIT"
"""Events kept per span, the oldest are dropped and counted (OpenTelemetry). Default: 128."""
OTEL_SPAN_LINK_COUNT_LIMIT: Final = "OTEL_SPAN_LINK_COUNT_LIMIT"
"""Links kept per span, more are dropped and counted (OpenTelemetry). Default: 128."""
TRACEPARENT: Final = "TRACEPARENT"
"""W3C ``traceparent`` of the span that started this process (set by
``nvrx_otel.tracing.inject_env``); ``setup_tracing`` makes it the parent of this process's
root spans. Default: unset (root spans start new traces)."""
TRACESTATE: Final = "TRACESTATE"
"""W3C ``tracestate`` that goes with TRACEPARENT. Default: unset."""

# --- parsers ---------------------------------------------------------------------------------

_TRUE = frozenset({"1", "true", "yes", "on", "t", "y"})
_FALSE = frozenset({"0", "false", "no", "off", "f", "n", ""})


def parse_flag(name: str, value: str) -> bool:
    """``1/true/yes/on`` → True, ``0/false/no/off`` (or empty) → False, case-insensitive."""
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name}={value!r}: expected one of 1/true/yes/on or 0/false/no/off")


def parse_nonneg_int(name: str, value: str) -> int:
    """A whole number >= 0 (ranks, sizes, ids)."""
    try:
        n = int(value.strip(), 10)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 0") from None
    if n < 0:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 0")
    return n


def parse_positive_int(name: str, value: str) -> int:
    """A whole number >= 1 (sizes, counts)."""
    n = parse_nonneg_int(name, value)
    if n < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 1")
    return n


def parse_nonneg_float(name: str, value: str) -> float:
    """A finite number >= 0 (seconds, megabytes)."""
    try:
        x = float(value.strip())
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number >= 0") from None
    if not (0 <= x < float("inf")):
        raise ValueError(f"{name}={value!r}: expected a number >= 0")
    return x


def parse_text(name: str, value: str) -> str:
    """Non-empty text without control characters (ids, names)."""
    v = value.strip()
    if not v or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"{name}={value!r}: expected non-empty text without control characters")
    return v


# --- reading -----------------------------------------------------------------------------------

_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn_once(message: str) -> None:
    """Print ``message`` to stderr once per process (setup paths never raise into training)."""
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    try:
        print(f"nvrx-otel: {message}", file=sys.stderr, flush=True)
    except Exception:  # stderr closed or broken: nothing left to tell
        pass


def _reset_after_fork() -> None:
    global _warn_lock
    _warn_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def read(
    name: str,
    parse: Callable[[str, str], T],
    default: T,
    *,
    environ: Mapping[str, str] | None = None,
    strict: bool = False,
    consequence: str = "using the default",
) -> T:
    """Parse ``name`` from ``environ`` (default ``os.environ``); unset or empty gives ``default``.

    A malformed value raises ``ValueError`` in strict mode; otherwise one line naming the
    variable, the value and ``consequence`` goes to stderr and ``default`` is returned.
    """
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse(name, raw)
    except ValueError as exc:
        if strict:
            raise
        warn_once(f"{exc}; {consequence}")
        return default


NVRX_OTEL_MAX_RECORD_KB: Final = "NVRX_OTEL_MAX_RECORD_KB"
"""Largest spool record (KB) a writer appends: a longer one has its message, exception
text, attribute values and span texts cut, each ending in ``… [truncated <N> bytes]``,
and stays one record. Never more than the spool file size (NVRX_LOG_MAX_FILE_SIZE_KB).
Default: 1024 (1 MB); at most 65536 (the aggregator's line limit)."""

NVRX_OTEL_SPOOL_SCALE: Final = "NVRX_OTEL_SPOOL_SCALE"
"""How many times NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB a process may hold in
the spool (when NVRX_OTEL_SPOOL_BUDGET_MB is not set). A spool record carries about three
times the bytes of NVRx's node-log line for the same call (identity, call site, key as
JSON), so the budget is scaled to keep at least as many records as NVRx keeps.
Default: 4."""
