"""Every setting nvrx-otel reads from the environment: one table, its parsers and resolvers.

Each variable name is a constant ``NAME: Final = "NAME"``; next to it one :class:`Setting`
row says how its text is parsed, its default and what it does. :data:`SETTINGS` is the
table of all rows (the README's settings table is generated from it, and a test holds the
two together). The NVRx variables keep NVRx's names, meanings and defaults; new knobs are
``NVRX_OTEL_<WHAT>``; ``OTEL_*`` variables keep their OpenTelemetry meaning.

A parser turns the text into a value or raises ``ValueError`` naming the variable and the
value. :meth:`Setting.get` (or :func:`read`) applies one: in strict mode (CLIs, tests) the
error propagates; on setup paths inside training it is printed once to stderr and the
default is used, so a malformed variable never stops a job. Derived values every layer
needs (the spool root, the spool file size and budget) have one resolver each below;
everything here is read at configuration time, never per record.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

T = TypeVar("T")
D = TypeVar("D")

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


def parse_path(name: str, value: str) -> str:
    """A file-system path: non-empty, no NUL (surrounding blanks are dropped)."""
    v = value.strip()
    if not v or "\0" in v:
        raise ValueError(f"{name}={value!r}: expected a path")
    return v


def parse_any(name: str, value: str) -> str:
    """Any text, as is (the meaning of its content is checked where it is used)."""
    return value


def parse_text(name: str, value: str) -> str:
    """Non-empty text without control characters (ids, names)."""
    v = value.strip()
    if not v or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"{name}={value!r}: expected non-empty text without control characters")
    return v


# --- the table ----------------------------------------------------------------------------

_KINDS: Final[dict[Callable[[str, str], object], str]] = {
    parse_flag: "flag",
    parse_nonneg_int: "whole number >= 0",
    parse_positive_int: "whole number >= 1",
    parse_nonneg_float: "number >= 0",
    parse_path: "path",
    parse_text: "text",
    parse_any: "text",
}

SETTINGS: Final[dict[str, Setting[object, object]]] = {}
"""Every row, by variable name, in declaration order."""


@dataclass(frozen=True)
class Setting(Generic[T, D]):
    """One environment variable: its name, parser, default (None: unset, or worked out as
    the meaning says) and meaning. Creating a row adds it to :data:`SETTINGS`."""

    name: str
    parse: Callable[[str, str], T]
    default: D
    meaning: str

    def __post_init__(self) -> None:
        if self.name in SETTINGS:
            raise ValueError(f"{self.name} is declared twice")
        SETTINGS[self.name] = self  # type: ignore[assignment]

    @property
    def kind(self) -> str:
        """What the value must be, in words (for the docs)."""
        return _KINDS.get(self.parse, "text")

    def get(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        strict: bool = False,
        consequence: str = "using the default",
    ) -> T | D:
        """The parsed value from ``environ`` (default ``os.environ``), see :func:`read`."""
        return read(
            self.name,
            self.parse,
            self.default,
            environ=environ,
            strict=strict,
            consequence=consequence,
        )


# --- NVRx (names, meanings and defaults kept) --------------------------------------------

NVRX_LOG_DEBUG: Final = "NVRX_LOG_DEBUG"
LOG_DEBUG: Final = Setting(
    NVRX_LOG_DEBUG,
    parse_flag,
    False,
    """``1``/``true``/``yes``/``on`` selects DEBUG level for the ``"nvrx"`` logger.""",
)

NVRX_LOG_TO_STDOUT: Final = "NVRX_LOG_TO_STDOUT"
LOG_TO_STDOUT: Final = Setting(
    NVRX_LOG_TO_STDOUT,
    parse_flag,
    False,
    """``1``/``true``/``yes``/``on``: log to stdout, not stderr, when not spooling.""",
)

NVRX_NODE_LOCAL_TMPDIR: Final = "NVRX_NODE_LOCAL_TMPDIR"
SPOOL_ROOT: Final = Setting(
    NVRX_NODE_LOCAL_TMPDIR,
    parse_path,
    None,
    """Node-local spool root; when set, every rank spools records there for the node's
aggregator. Keep it on node-local storage (/tmp, /scratch, NVMe).""",
)

NVRX_LOG_MAX_FILE_SIZE_KB: Final = "NVRX_LOG_MAX_FILE_SIZE_KB"
SPOOL_FILE_SIZE_KB: Final = Setting(
    NVRX_LOG_MAX_FILE_SIZE_KB,
    parse_positive_int,
    10240,
    """Size in KB at which a rank's spool file is rotated.""",
)

NVRX_LOG_MAX_LOG_FILES: Final = "NVRX_LOG_MAX_LOG_FILES"
SPOOL_FILES: Final = Setting(
    NVRX_LOG_MAX_LOG_FILES,
    parse_positive_int,
    4,
    """Spool files kept per process; with the file size it sets the spool budget.""",
)

# --- nvrx-otel's own knobs ---------------------------------------------------------------

NVRX_OTEL_NODE_ID: Final = "NVRX_OTEL_NODE_ID"
NODE_ID: Final = Setting(
    NVRX_OTEL_NODE_ID,
    parse_text,
    None,
    """Node id used in node-log names and records. Default: the host name. Lets tests and
containers name nodes explicitly.""",
)

NVRX_OTEL_DISABLED: Final = "NVRX_OTEL_DISABLED"
DISABLED: Final = Setting(
    NVRX_OTEL_DISABLED,
    parse_flag,
    False,
    """``1``/``true``/``yes``/``on`` turns off every nvrx-otel side effect beyond plain stderr
logging (no spool, no tracing, no export).""",
)

NVRX_OTEL_NODE_LOG_MAX_MB: Final = "NVRX_OTEL_NODE_LOG_MAX_MB"
NODE_LOG_MAX_MB: Final = Setting(
    NVRX_OTEL_NODE_LOG_MAX_MB,
    parse_nonneg_float,
    0.0,
    """Size in MB (fractions allowed) at which the aggregator rotates the node log to ``.1``,
``.2``, ... (checked between write batches, so a file may pass it by one batch).""",
)

NVRX_OTEL_NODE_LOG_BACKUPS: Final = "NVRX_OTEL_NODE_LOG_BACKUPS"
NODE_LOG_BACKUPS: Final = Setting(
    NVRX_OTEL_NODE_LOG_BACKUPS,
    parse_nonneg_int,
    None,
    """Rotated node-log backups to keep; rotation deletes older ones and reports the records they
held as dropped (reason ``rotation``). 0 keeps none. Default: unset (keep all).""",
)

NVRX_OTEL_HOLD_WINDOW_MS: Final = "NVRX_OTEL_HOLD_WINDOW_MS"
HOLD_WINDOW_MS: Final = Setting(
    NVRX_OTEL_HOLD_WINDOW_MS,
    parse_nonneg_int,
    2000,
    """With ``--en-chronological-ordering``: how long (ms) the aggregator holds a record so that
earlier records of other ranks, read later, can still go before it.""",
)

NVRX_OTEL_STATUS_INTERVAL_S: Final = "NVRX_OTEL_STATUS_INTERVAL_S"
STATUS_INTERVAL_S: Final = Setting(
    NVRX_OTEL_STATUS_INTERVAL_S,
    parse_nonneg_float,
    60.0,
    """Seconds between the aggregator's status lines on stderr (lag, backlog, records/s, drops,
corrupt records). 0 turns them off; the final summary is always written.""",
)

NVRX_OTEL_SPOOL_SPANS: Final = "NVRX_OTEL_SPOOL_SPANS"
SPOOL_SPANS: Final = Setting(
    NVRX_OTEL_SPOOL_SPANS,
    parse_flag,
    True,
    """``0``/``false``: with a spool configured, spans still go over OTLP (the SDK path with
``OTEL_TRACES_EXPORTER``) instead of into the spool, for the collector's filelog agent
mode, which reads only logs from the spool files.""",
)

NVRX_OTEL_SPOOL_BUDGET_MB: Final = "NVRX_OTEL_SPOOL_BUDGET_MB"
SPOOL_BUDGET_MB: Final = Setting(
    NVRX_OTEL_SPOOL_BUDGET_MB,
    parse_nonneg_float,
    None,
    """Spool bytes (MB) one process may hold unconsumed before new records are dropped and
counted. Default: NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB x NVRX_OTEL_SPOOL_SCALE
(160 MB).""",
)

NVRX_OTEL_SPOOL_SCALE: Final = "NVRX_OTEL_SPOOL_SCALE"
SPOOL_SCALE: Final = Setting(
    NVRX_OTEL_SPOOL_SCALE,
    parse_positive_int,
    4,
    """How many times NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB a process may hold in
the spool (when NVRX_OTEL_SPOOL_BUDGET_MB is not set). A spool record carries about three
times the bytes of NVRx's node-log line for the same call (identity, call site, key as
JSON), so the budget is scaled to keep at least as many records as NVRx keeps.""",
)

MAX_RECORD_KB_LIMIT: Final = 2048
"""The largest NVRX_OTEL_MAX_RECORD_KB honoured; the aggregator's reader skips a line
longer than twice this as corrupt without holding it."""

NVRX_OTEL_MAX_RECORD_KB: Final = "NVRX_OTEL_MAX_RECORD_KB"
MAX_RECORD_KB: Final = Setting(
    NVRX_OTEL_MAX_RECORD_KB,
    parse_positive_int,
    1024,
    """Largest spool record (KB) a writer appends: a longer one has its message, exception
text, attribute values and span texts cut, each ending in ``… [truncated <N> bytes]``,
and stays one record. Never more than the spool file size (NVRX_LOG_MAX_FILE_SIZE_KB);
at most 2048.""",
)

NVRX_OTEL_COLLECTOR_BIN: Final = "NVRX_OTEL_COLLECTOR_BIN"
Setting(
    NVRX_OTEL_COLLECTOR_BIN,
    parse_path,
    None,
    """Path of the built collector binary (``otelcol-nvrx``) the collector tests run. Default:
unset (the tests get it from ``scripts/build-collector.sh``, which builds or reuses it).""",
)

NVRX_OTEL_COLLECTOR_CACHE: Final = "NVRX_OTEL_COLLECTOR_CACHE"
Setting(
    NVRX_OTEL_COLLECTOR_CACHE,
    parse_path,
    None,
    """Directory where ``scripts/build-collector.sh`` keeps collector builds and Go's caches.
Default: ``${XDG_CACHE_HOME:-~/.cache}/nvrx-otel/collector``.""",
)

# --- LogFlow (the loguru front end; LogFlow's names, meanings and defaults) ----------------

LOGFLOW_DIR: Final = "LOGFLOW_DIR"
Setting(
    LOGFLOW_DIR,
    parse_path,
    None,
    """Directory of the loguru front end's run files (created if missing). Default: ``./logs``.""",
)
LOGFLOW_SCRIPT_NAME: Final = "LOGFLOW_SCRIPT_NAME"
Setting(
    LOGFLOW_SCRIPT_NAME,
    parse_text,
    None,
    """Stem of the run file ``<log dir>/<stem>.log``. Default: the ``__main__`` file's stem (its
folder's name for ``__main__.py``), else ``argv[0]``'s stem, else ``app``.""",
)
LOGFLOW_FILE_LEVEL: Final = "LOGFLOW_FILE_LEVEL"
Setting(
    LOGFLOW_FILE_LEVEL,
    parse_text,
    None,
    """Lowest level written to the run file and, with a spool, to the node log (a loguru level
name, any case, or a number). Default: DEBUG.""",
)
LOGFLOW_CONSOLE_LEVEL: Final = "LOGFLOW_CONSOLE_LEVEL"
Setting(
    LOGFLOW_CONSOLE_LEVEL,
    parse_text,
    None,
    """Lowest level shown on the console (rank 0's main process only). Default: INFO.""",
)
LOGFLOW_ROTATION_ON_STARTUP: Final = "LOGFLOW_ROTATION_ON_STARTUP"
Setting(
    LOGFLOW_ROTATION_ON_STARTUP,
    parse_text,
    None,
    """``true``/``1``/``t``/``y``/``yes`` (or ``false``/``0``/``f``/``n``/``no``): archive an
existing run file at startup so every run starts a fresh one. Default: true.""",
)
LOGFLOW_STARTUP_ROTATION: Final = "LOGFLOW_STARTUP_ROTATION"
Setting(
    LOGFLOW_STARTUP_ROTATION,
    parse_text,
    None,
    """The other spelling of LOGFLOW_ROTATION_ON_STARTUP (LogFlow's README uses it); when both
are set they must agree. Default: unset.""",
)
LOGFLOW_RETENTION: Final = "LOGFLOW_RETENTION"
Setting(
    LOGFLOW_RETENTION,
    parse_text,
    None,
    """Startup archives of this script's run file to keep; 0 keeps none. Default: 5.""",
)
LOGFLOW_ENQUEUE: Final = "LOGFLOW_ENQUEUE"
Setting(
    LOGFLOW_ENQUEUE,
    parse_text,
    None,
    """Boolean: the run file is written by loguru's background thread (``enqueue=True``); records
still reach the spool at the call site. Default: false.""",
)
LOGFLOW_EAGER_ENQUEUE: Final = "LOGFLOW_EAGER_ENQUEUE"
Setting(
    LOGFLOW_EAGER_ENQUEUE,
    parse_text,
    None,
    """Boolean, accepted for LogFlow compatibility: LogFlow creates the enqueue queue lazily at
the first child process unless this is true; nvrx-otel always creates it at configure
time, so the value changes nothing. Default: false.""",
)
NVRX_OTEL_LOGURU_DIAGNOSE: Final = "NVRX_OTEL_LOGURU_DIAGNOSE"
Setting(
    NVRX_OTEL_LOGURU_DIAGNOSE,
    parse_text,
    None,
    """Boolean: loguru's ``diagnose`` (local variable values, secrets included, written next to
tracebacks in the run file and on the console). Default: false.""",
)
NVRX_OTEL_LOGFLOW_PARENT: Final = "NVRX_OTEL_LOGFLOW_PARENT"
Setting(
    NVRX_OTEL_LOGFLOW_PARENT,
    parse_any,
    None,
    """Internal: set by the loguru front end in the process that configured it (JSON of its
resolved settings and pid) so spawned children write where their parent does. Not meant to
be set by hand. Default: unset.""",
)
XDG_CONFIG_HOME: Final = "XDG_CONFIG_HOME"
Setting(
    XDG_CONFIG_HOME,
    parse_path,
    None,
    """Base of the user configuration; the loguru front end reads
``$XDG_CONFIG_HOME/logflow/config.yaml``. Default: ``~/.config``.""",
)
NO_COLOR: Final = "NO_COLOR"
Setting(
    NO_COLOR,
    parse_any,
    None,
    """Any non-empty value turns console colours off (https://no-color.org). Default: unset
(colour when stderr is a terminal).""",
)

# --- launchers: rank, size and job identity (read, never written) --------------------------

RANK: Final = "RANK"
Setting(RANK, parse_nonneg_int, None, """Global workload rank (torchrun, most launchers).""")
LOCAL_RANK: Final = "LOCAL_RANK"
Setting(LOCAL_RANK, parse_nonneg_int, None, """Workload rank on the node (torchrun).""")
WORLD_SIZE: Final = "WORLD_SIZE"
Setting(WORLD_SIZE, parse_nonneg_int, None, """Number of workload processes (torchrun).""")
LOCAL_WORLD_SIZE: Final = "LOCAL_WORLD_SIZE"
Setting(
    LOCAL_WORLD_SIZE,
    parse_nonneg_int,
    None,
    """Number of workload processes on the node (torchrun).""",
)
GROUP_RANK: Final = "GROUP_RANK"
Setting(GROUP_RANK, parse_nonneg_int, None, """Rank of the node's worker group (torchrun).""")
NODE_RANK: Final = "NODE_RANK"
Setting(
    NODE_RANK,
    parse_nonneg_int,
    None,
    """Rank of the node (Lightning and some launchers); LogFlow's fallback for GROUP_RANK.""",
)
TORCHELASTIC_RUN_ID: Final = "TORCHELASTIC_RUN_ID"
Setting(
    TORCHELASTIC_RUN_ID,
    parse_text,
    None,
    """torchrun's run id (the job id when no scheduler id exists).""",
)
TORCHELASTIC_RESTART_COUNT: Final = "TORCHELASTIC_RESTART_COUNT"
Setting(
    TORCHELASTIC_RESTART_COUNT,
    parse_nonneg_int,
    None,
    """How many times torchrun restarted the workers (the restart cycle).""",
)
OMPI_COMM_WORLD_RANK: Final = "OMPI_COMM_WORLD_RANK"
Setting(OMPI_COMM_WORLD_RANK, parse_nonneg_int, None, """Open MPI global rank.""")
OMPI_COMM_WORLD_LOCAL_RANK: Final = "OMPI_COMM_WORLD_LOCAL_RANK"
Setting(OMPI_COMM_WORLD_LOCAL_RANK, parse_nonneg_int, None, """Open MPI rank on the node.""")
OMPI_COMM_WORLD_SIZE: Final = "OMPI_COMM_WORLD_SIZE"
Setting(OMPI_COMM_WORLD_SIZE, parse_nonneg_int, None, """Open MPI number of processes.""")
OMPI_COMM_WORLD_LOCAL_SIZE: Final = "OMPI_COMM_WORLD_LOCAL_SIZE"
Setting(
    OMPI_COMM_WORLD_LOCAL_SIZE,
    parse_nonneg_int,
    None,
    """Open MPI number of processes on the node.""",
)
PMIX_RANK: Final = "PMIX_RANK"
Setting(
    PMIX_RANK,
    parse_nonneg_int,
    None,
    """PMIx rank (Slurm ``--mpi=pmix``, PRRTE). PMIx exports only the rank and ``PMIX_NAMESPACE``
(plus server contact variables) to the environment: local rank and sizes are PMIx keys
read through the PMIx client library, not environment variables.""",
)
PMIX_NAMESPACE: Final = "PMIX_NAMESPACE"
Setting(PMIX_NAMESPACE, parse_text, None, """PMIx namespace of the job (informational).""")
PMI_RANK: Final = "PMI_RANK"
Setting(PMI_RANK, parse_nonneg_int, None, """MPICH/Hydra (PMI-1/2) rank.""")
PMI_ID: Final = "PMI_ID"
Setting(
    PMI_ID,
    parse_nonneg_int,
    None,
    """MPICH/Hydra rank when the ranks reach PMI over a port (``mpiexec -pmi-port``): Hydra
then exports ``PMI_ID`` and ``PMI_PORT`` instead of ``PMI_RANK``, ``PMI_SIZE`` and
``PMI_FD``, so the world size stays unknown.""",
)
PMI_SIZE: Final = "PMI_SIZE"
Setting(PMI_SIZE, parse_nonneg_int, None, """MPICH/Hydra (PMI-1/2) number of processes.""")
MPI_LOCALRANKID: Final = "MPI_LOCALRANKID"
Setting(MPI_LOCALRANKID, parse_nonneg_int, None, """MPICH/Hydra rank on the node.""")
MPI_LOCALNRANKS: Final = "MPI_LOCALNRANKS"
Setting(MPI_LOCALNRANKS, parse_nonneg_int, None, """MPICH/Hydra number of processes on the node.""")
SLURM_PROCID: Final = "SLURM_PROCID"
Setting(SLURM_PROCID, parse_nonneg_int, None, """Slurm task rank (the infrastructure rank).""")
SLURM_LOCALID: Final = "SLURM_LOCALID"
Setting(
    SLURM_LOCALID,
    parse_nonneg_int,
    None,
    """Slurm task rank on the node (the infrastructure local rank).""",
)
SLURM_NNODES: Final = "SLURM_NNODES"
Setting(
    SLURM_NNODES,
    parse_nonneg_int,
    None,
    """Slurm number of nodes in the job step (job-array infra-rank formula).""",
)
SLURM_JOB_NUM_NODES: Final = "SLURM_JOB_NUM_NODES"
Setting(
    SLURM_JOB_NUM_NODES,
    parse_nonneg_int,
    None,
    """Slurm number of nodes in the job (fallback for SLURM_NNODES).""",
)
SLURM_JOB_ID: Final = "SLURM_JOB_ID"
Setting(SLURM_JOB_ID, parse_text, None, """Slurm job id.""")
SLURM_ARRAY_JOB_ID: Final = "SLURM_ARRAY_JOB_ID"
Setting(SLURM_ARRAY_JOB_ID, parse_text, None, """Slurm job-array master job id.""")
SLURM_ARRAY_TASK_ID: Final = "SLURM_ARRAY_TASK_ID"
Setting(SLURM_ARRAY_TASK_ID, parse_nonneg_int, None, """Slurm job-array task id.""")

# --- OpenTelemetry (standard meaning) -------------------------------------------------------

OTEL_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
Setting(
    OTEL_SERVICE_NAME,
    parse_text,
    None,
    """``service.name`` of every resource (OpenTelemetry). Default: the SDK's.""",
)
OTEL_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"
Setting(
    OTEL_RESOURCE_ATTRIBUTES,
    parse_any,
    None,
    """Extra resource attributes ``k=v,k2=v2`` (OpenTelemetry); identity attributes win.""",
)
OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
Setting(
    OTEL_EXPORTER_OTLP_ENDPOINT,
    parse_text,
    None,
    """Base URL of the OTLP endpoint; for HTTP ``/v1/<signal>`` is appended. Setting it (or a
per-signal ``OTEL_EXPORTER_OTLP_{LOGS,TRACES,METRICS}_ENDPOINT``, used as is) turns the
aggregator's OTLP output on. Default: unset (no OTLP output).""",
)
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
Setting(
    OTEL_EXPORTER_OTLP_PROTOCOL,
    parse_text,
    None,
    """``http/protobuf`` (default) or ``grpc`` (needs the ``grpc`` extra); per-signal variants
``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`` win, as for every option below.""",
)
OTEL_EXPORTER_OTLP_HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
Setting(
    OTEL_EXPORTER_OTLP_HEADERS,
    parse_any,
    None,
    """Extra request headers ``k=v,k2=v2`` (URL-encoded values). Default: none.""",
)
OTEL_EXPORTER_OTLP_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CERTIFICATE"
Setting(
    OTEL_EXPORTER_OTLP_CERTIFICATE,
    parse_text,
    None,
    """CA bundle (PEM) to verify the endpoint's TLS certificate. Default: the system's.""",
)
OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
Setting(
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    parse_text,
    None,
    """Client certificate (PEM) for mutual TLS. Default: none.""",
)
OTEL_EXPORTER_OTLP_CLIENT_KEY: Final = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
Setting(
    OTEL_EXPORTER_OTLP_CLIENT_KEY,
    parse_text,
    None,
    """Client private key (PEM) for mutual TLS. Default: none.""",
)
OTEL_EXPORTER_OTLP_COMPRESSION: Final = "OTEL_EXPORTER_OTLP_COMPRESSION"
Setting(OTEL_EXPORTER_OTLP_COMPRESSION, parse_text, None, """``gzip`` or ``none`` (default).""")
OTEL_EXPORTER_OTLP_TIMEOUT: Final = "OTEL_EXPORTER_OTLP_TIMEOUT"
Setting(
    OTEL_EXPORTER_OTLP_TIMEOUT,
    parse_text,
    None,
    """Timeout of one export request in milliseconds. Default: 10000.""",
)
OTEL_SDK_DISABLED: Final = "OTEL_SDK_DISABLED"
Setting(
    OTEL_SDK_DISABLED,
    parse_text,
    None,
    """``true`` disables the OpenTelemetry SDK (OpenTelemetry).""",
)
OTEL_TRACES_SAMPLER: Final = "OTEL_TRACES_SAMPLER"
Setting(
    OTEL_TRACES_SAMPLER,
    parse_text,
    None,
    """Span sampler (OpenTelemetry): ``always_on``, ``always_off``, ``traceidratio``,
``parentbased_always_on``, ``parentbased_always_off``, ``parentbased_traceidratio``; an
unknown name is reported once on stderr. Default: ``parentbased_always_on``.""",
)
OTEL_TRACES_SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
Setting(
    OTEL_TRACES_SAMPLER_ARG,
    parse_text,
    None,
    """Sampling ratio in [0, 1] for the ``*traceidratio`` samplers (OpenTelemetry).
Default: 1.0.""",
)
OTEL_TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
Setting(
    OTEL_TRACES_EXPORTER,
    parse_text,
    None,
    """Comma-separated span exporters without a spool: ``otlp``, ``console``, ``none`` or an
installed exporter entry point (OpenTelemetry); ``none`` also keeps spans out of the spool
(ids still propagate). Default: ``otlp``.""",
)
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
Setting(
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    parse_text,
    None,
    """OTLP transport for spans, overriding OTEL_EXPORTER_OTLP_PROTOCOL (OpenTelemetry). Default:
unset.""",
)
OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT: Final = "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"
Setting(
    OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT,
    parse_text,
    None,
    """Attributes kept per span, more are dropped and counted (OpenTelemetry). Default: 128.""",
)
OTEL_SPAN_EVENT_COUNT_LIMIT: Final = "OTEL_SPAN_EVENT_COUNT_LIMIT"
Setting(
    OTEL_SPAN_EVENT_COUNT_LIMIT,
    parse_text,
    None,
    """Events kept per span, the oldest are dropped and counted (OpenTelemetry). Default: 128.""",
)
OTEL_SPAN_LINK_COUNT_LIMIT: Final = "OTEL_SPAN_LINK_COUNT_LIMIT"
Setting(
    OTEL_SPAN_LINK_COUNT_LIMIT,
    parse_text,
    None,
    """Links kept per span, more are dropped and counted (OpenTelemetry). Default: 128.""",
)
TRACEPARENT: Final = "TRACEPARENT"
Setting(
    TRACEPARENT,
    parse_text,
    None,
    """W3C ``traceparent`` of the span that started this process (set by
``nvrx_otel.tracing.inject_env``); ``setup_tracing`` makes it the parent of this process's
root spans. Default: unset (root spans start new traces).""",
)
TRACESTATE: Final = "TRACESTATE"
Setting(
    TRACESTATE,
    parse_text,
    None,
    """W3C ``tracestate`` that goes with TRACEPARENT. Default: unset.""",
)

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
    default: D,
    *,
    environ: Mapping[str, str] | None = None,
    strict: bool = False,
    consequence: str = "using the default",
) -> T | D:
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


# --- resolvers: values every layer needs, worked out in one place --------------------------


def spool_root(
    directory: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
) -> str | None:
    """The spool root: ``directory`` when given (non-empty), else NVRX_NODE_LOCAL_TMPDIR;
    None when neither is set (no spool)."""
    if directory is not None and os.fspath(directory):
        return os.fspath(directory)
    return SPOOL_ROOT.get(environ, strict=strict, consequence="not spooling")


def spool_file_size(
    file_size_kb: int | None = None, environ: Mapping[str, str] | None = None
) -> int:
    """Spool file size in bytes: ``file_size_kb`` when given, else NVRX_LOG_MAX_FILE_SIZE_KB."""
    kb = SPOOL_FILE_SIZE_KB.get(environ) if file_size_kb is None else file_size_kb
    return int(kb) * 1024


def spool_files(environ: Mapping[str, str] | None = None) -> int:
    """Spool files kept per process (NVRX_LOG_MAX_LOG_FILES)."""
    return SPOOL_FILES.get(environ)


def spool_budget(environ: Mapping[str, str] | None = None) -> int:
    """Spool bytes one process may hold unconsumed: NVRX_OTEL_SPOOL_BUDGET_MB when set
    above 0, else NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB x NVRX_OTEL_SPOOL_SCALE
    (a spool record is about three times NVRx's node-log line for the same call, so as
    many records fit as NVRx keeps)."""
    mb = SPOOL_BUDGET_MB.get(environ)
    if mb:
        return int(mb * 1024 * 1024)
    return spool_files(environ) * spool_file_size(environ=environ) * SPOOL_SCALE.get(environ)


def max_record_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The per-record cap in bytes: NVRX_OTEL_MAX_RECORD_KB, at most MAX_RECORD_KB_LIMIT."""
    return min(MAX_RECORD_KB.get(environ), MAX_RECORD_KB_LIMIT) * 1024


def default_text(setting: Setting[object, object]) -> str:
    """A row's default as the docs show it."""
    value = setting.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_markdown() -> str:
    """``docs/settings.md``: one table row per setting, from :data:`SETTINGS`."""
    lines = [
        "# Settings",
        "",
        "<!-- Generated from src/nvrx_otel/env.py by `python -m nvrx_otel._generate`;"
        " do not edit. -->",
        "",
        "Every environment variable nvrx-otel reads. A malformed value never stops training:",
        "the setup path prints one line naming the variable and the value and uses the",
        "default; the CLIs (`--strict`) fail with the same message.",
        "",
        "| variable | value | default | meaning |",
        "|---|---|---|---|",
    ]
    for s in SETTINGS.values():
        meaning = " ".join(s.meaning.split()).replace("``", "`").replace("|", "\\|")
        lines.append(f"| `{s.name}` | {s.kind} | {default_text(s)} | {meaning} |")
    return "\n".join(lines) + "\n"
