"""Every setting nvrx-otel reads from the environment: one table, and its resolvers.

Each variable name is a constant ``NAME: Final = "NAME"``; next to it one ``Setting`` row
(``envparse.py``) says how its text is parsed, its default and what it does.
:data:`SETTINGS` is the table of all rows: this module's (NVRx's variables and
nvrx-otel's own knobs), then those of the variables other tools define (LogFlow's, the
launchers', OpenTelemetry's: ``envexternal.py``), re-exported here so every setting is
``env.<NAME>``. ``docs/settings.md`` is generated from the table (``_generate.py``), and a
test holds the two together. The NVRx variables keep NVRx's names, meanings and defaults;
new knobs are ``NVRX_OTEL_<WHAT>``; ``OTEL_*`` variables keep their OpenTelemetry meaning.

A parser turns the text into a value or raises ``ValueError`` naming the variable and the
value. :meth:`Setting.get` (or :func:`read`) applies one: in strict mode (CLIs, tests) the
error propagates; on setup paths inside training it is printed once to stderr and the
default is used, so a malformed variable never stops a job. Derived values every layer
needs (the spool root, the spool file size and budget) have one resolver each below;
everything here is read at configuration time, never per record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from nvrx_otel.envparse import SETTINGS as SETTINGS
from nvrx_otel.envparse import Setting as Setting
from nvrx_otel.envparse import parse_any as parse_any
from nvrx_otel.envparse import parse_auto_flag as parse_auto_flag
from nvrx_otel.envparse import parse_flag as parse_flag
from nvrx_otel.envparse import parse_nonneg_float as parse_nonneg_float
from nvrx_otel.envparse import parse_nonneg_int as parse_nonneg_int
from nvrx_otel.envparse import parse_path as parse_path
from nvrx_otel.envparse import parse_positive_int as parse_positive_int
from nvrx_otel.envparse import parse_signal as parse_signal
from nvrx_otel.envparse import parse_tags as parse_tags
from nvrx_otel.envparse import parse_text as parse_text
from nvrx_otel.envparse import read as read
from nvrx_otel.envparse import warn_once as warn_once

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

NVRX_OTEL_JOB_ID: Final = "NVRX_OTEL_JOB_ID"
JOB_ID: Final = Setting(
    NVRX_OTEL_JOB_ID,
    parse_text,
    None,
    """Job id, the spool directory's name; wins over SLURM_JOB_ID and TORCHELASTIC_RUN_ID.
``nvrx-otel run`` sets it for its command, so that its ranks and its aggregator agree
even when the launcher picks a random id (``torchrun --standalone``). Default: unset (the
launcher's id).""",
)

NVRX_OTEL_RUN_TAGS: Final = "NVRX_OTEL_RUN_TAGS"
RUN_TAGS: Final = Setting(
    NVRX_OTEL_RUN_TAGS,
    parse_tags,
    None,
    """Run tags, ``key=value`` pairs separated by commas (values percent-encoded as in
OTEL_RESOURCE_ATTRIBUTES): ``experiment`` and ``run_id`` become ``nv.nvrx.run.experiment``
and ``nv.nvrx.run.id``, any other key ``nv.nvrx.run.tag.<key>``, resource attributes of
every record and span. ``nvrx_otel.set_run_tags`` sets it for the process and its
children. At most 4096 bytes (every process inherits it). Default: unset (no run tags).""",
)

NVRX_OTEL_DISABLED: Final = "NVRX_OTEL_DISABLED"
DISABLED: Final = Setting(
    NVRX_OTEL_DISABLED,
    parse_flag,
    False,
    """``1``/``true``/``yes``/``on`` turns off every nvrx-otel side effect beyond plain stderr
logging (no spool, no tracing, no export).""",
)

NVRX_OTEL_CAPTURE_OUTPUT: Final = "NVRX_OTEL_CAPTURE_OUTPUT"
CAPTURE_OUTPUT: Final = Setting(
    NVRX_OTEL_CAPTURE_OUTPUT,
    parse_auto_flag,
    None,
    """Whether a spooling process records what is written to its file descriptors 1 and 2
(native code and child processes included) as ``stdout``/``stderr`` records, one per line;
the original destination still receives every byte. ``auto`` (the default): for each
descriptor that is not a terminal. ``on`` captures a terminal too (its ``isatty()`` then
turns false); ``off`` captures nothing. See docs/capture.md.""",
)

NVRX_OTEL_CAPTURE_STACKS: Final = "NVRX_OTEL_CAPTURE_STACKS"
CAPTURE_STACKS: Final = Setting(
    NVRX_OTEL_CAPTURE_STACKS,
    parse_flag,
    True,
    """Whether a spooling process records the Python stack of every thread when it dies of a
fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL) or receives SIGTERM, and how it
ended (exit status, signal, vanished). On by default.""",
)

NVRX_OTEL_STACKS_SIGNAL: Final = "NVRX_OTEL_STACKS_SIGNAL"
STACKS_SIGNAL: Final = Setting(
    NVRX_OTEL_STACKS_SIGNAL,
    parse_signal,
    None,
    """A signal (``SIGUSR1``, say) on which a spooling process records the Python stack of
every thread and carries on, to look at a live hang (``srun --signal``, ``kill``). Not
taken over when the program has a handler of its own for it. Default: unset (none).""",
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

NVRX_OTEL_KAFKA_LIB: Final = "NVRX_OTEL_KAFKA_LIB"
Setting(
    NVRX_OTEL_KAFKA_LIB,
    parse_path,
    None,
    """Directory of the Apache Kafka broker's jars the Kafka tests run. Default: unset (the
tests get it from ``scripts/fetch-kafka.sh``, which fetches it with Maven or reuses it).""",
)

NVRX_OTEL_KAFKA_CACHE: Final = "NVRX_OTEL_KAFKA_CACHE"
Setting(
    NVRX_OTEL_KAFKA_CACHE,
    parse_path,
    None,
    """Directory where ``scripts/fetch-kafka.sh`` keeps the Kafka broker's jars (per version)
and Maven's repository. Default: ``${XDG_CACHE_HOME:-~/.cache}/nvrx-otel/kafka``.""",
)

# --- variables other tools define (envexternal.py): after ours in the table ------------

from nvrx_otel.envexternal import GROUP_RANK as GROUP_RANK
from nvrx_otel.envexternal import LOCAL_RANK as LOCAL_RANK
from nvrx_otel.envexternal import LOCAL_WORLD_SIZE as LOCAL_WORLD_SIZE
from nvrx_otel.envexternal import LOGFLOW_CONSOLE_LEVEL as LOGFLOW_CONSOLE_LEVEL
from nvrx_otel.envexternal import LOGFLOW_DIR as LOGFLOW_DIR
from nvrx_otel.envexternal import LOGFLOW_EAGER_ENQUEUE as LOGFLOW_EAGER_ENQUEUE
from nvrx_otel.envexternal import LOGFLOW_ENQUEUE as LOGFLOW_ENQUEUE
from nvrx_otel.envexternal import LOGFLOW_FILE_LEVEL as LOGFLOW_FILE_LEVEL
from nvrx_otel.envexternal import LOGFLOW_RETENTION as LOGFLOW_RETENTION
from nvrx_otel.envexternal import LOGFLOW_ROTATION_ON_STARTUP as LOGFLOW_ROTATION_ON_STARTUP
from nvrx_otel.envexternal import LOGFLOW_SCRIPT_NAME as LOGFLOW_SCRIPT_NAME
from nvrx_otel.envexternal import LOGFLOW_STARTUP_ROTATION as LOGFLOW_STARTUP_ROTATION
from nvrx_otel.envexternal import MPI_LOCALNRANKS as MPI_LOCALNRANKS
from nvrx_otel.envexternal import MPI_LOCALRANKID as MPI_LOCALRANKID
from nvrx_otel.envexternal import NO_COLOR as NO_COLOR
from nvrx_otel.envexternal import NODE_RANK as NODE_RANK
from nvrx_otel.envexternal import NVRX_OTEL_LOGFLOW_PARENT as NVRX_OTEL_LOGFLOW_PARENT
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_COMPRESSION as NVRX_OTEL_LOGURU_COMPRESSION
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_DIAGNOSE as NVRX_OTEL_LOGURU_DIAGNOSE
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_FILE_FORMAT as NVRX_OTEL_LOGURU_FILE_FORMAT
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_FILE_PER as NVRX_OTEL_LOGURU_FILE_PER
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_RELOAD_ACTION as NVRX_OTEL_LOGURU_RELOAD_ACTION
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_RELOAD_SIGNAL as NVRX_OTEL_LOGURU_RELOAD_SIGNAL
from nvrx_otel.envexternal import (
    NVRX_OTEL_LOGURU_ROTATION_INTERVAL as NVRX_OTEL_LOGURU_ROTATION_INTERVAL,
)
from nvrx_otel.envexternal import NVRX_OTEL_LOGURU_ROTATION_SIZE as NVRX_OTEL_LOGURU_ROTATION_SIZE
from nvrx_otel.envexternal import OMPI_COMM_WORLD_LOCAL_RANK as OMPI_COMM_WORLD_LOCAL_RANK
from nvrx_otel.envexternal import OMPI_COMM_WORLD_LOCAL_SIZE as OMPI_COMM_WORLD_LOCAL_SIZE
from nvrx_otel.envexternal import OMPI_COMM_WORLD_RANK as OMPI_COMM_WORLD_RANK
from nvrx_otel.envexternal import OMPI_COMM_WORLD_SIZE as OMPI_COMM_WORLD_SIZE
from nvrx_otel.envexternal import (
    OTEL_EXPERIMENTAL_RESOURCE_DETECTORS as OTEL_EXPERIMENTAL_RESOURCE_DETECTORS,
)
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_CERTIFICATE as OTEL_EXPORTER_OTLP_CERTIFICATE
from nvrx_otel.envexternal import (
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE as OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
)
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_CLIENT_KEY as OTEL_EXPORTER_OTLP_CLIENT_KEY
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_COMPRESSION as OTEL_EXPORTER_OTLP_COMPRESSION
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_ENDPOINT as OTEL_EXPORTER_OTLP_ENDPOINT
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_HEADERS as OTEL_EXPORTER_OTLP_HEADERS
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_INSECURE as OTEL_EXPORTER_OTLP_INSECURE
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_PROTOCOL as OTEL_EXPORTER_OTLP_PROTOCOL
from nvrx_otel.envexternal import OTEL_EXPORTER_OTLP_TIMEOUT as OTEL_EXPORTER_OTLP_TIMEOUT
from nvrx_otel.envexternal import (
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
)
from nvrx_otel.envexternal import OTEL_PYTHON_CONFIGURATOR as OTEL_PYTHON_CONFIGURATOR
from nvrx_otel.envexternal import OTEL_PYTHON_DISTRO as OTEL_PYTHON_DISTRO
from nvrx_otel.envexternal import OTEL_RESOURCE_ATTRIBUTES as OTEL_RESOURCE_ATTRIBUTES
from nvrx_otel.envexternal import OTEL_SDK_DISABLED as OTEL_SDK_DISABLED
from nvrx_otel.envexternal import OTEL_SERVICE_NAME as OTEL_SERVICE_NAME
from nvrx_otel.envexternal import OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT as OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT
from nvrx_otel.envexternal import OTEL_SPAN_EVENT_COUNT_LIMIT as OTEL_SPAN_EVENT_COUNT_LIMIT
from nvrx_otel.envexternal import OTEL_SPAN_LINK_COUNT_LIMIT as OTEL_SPAN_LINK_COUNT_LIMIT
from nvrx_otel.envexternal import OTEL_TRACES_EXPORTER as OTEL_TRACES_EXPORTER
from nvrx_otel.envexternal import OTEL_TRACES_SAMPLER as OTEL_TRACES_SAMPLER
from nvrx_otel.envexternal import OTEL_TRACES_SAMPLER_ARG as OTEL_TRACES_SAMPLER_ARG
from nvrx_otel.envexternal import PMI_ID as PMI_ID
from nvrx_otel.envexternal import PMI_RANK as PMI_RANK
from nvrx_otel.envexternal import PMI_SIZE as PMI_SIZE
from nvrx_otel.envexternal import PMIX_NAMESPACE as PMIX_NAMESPACE
from nvrx_otel.envexternal import PMIX_RANK as PMIX_RANK
from nvrx_otel.envexternal import RANK as RANK
from nvrx_otel.envexternal import SLURM_ARRAY_JOB_ID as SLURM_ARRAY_JOB_ID
from nvrx_otel.envexternal import SLURM_ARRAY_TASK_ID as SLURM_ARRAY_TASK_ID
from nvrx_otel.envexternal import SLURM_JOB_ID as SLURM_JOB_ID
from nvrx_otel.envexternal import SLURM_JOB_NUM_NODES as SLURM_JOB_NUM_NODES
from nvrx_otel.envexternal import SLURM_LOCALID as SLURM_LOCALID
from nvrx_otel.envexternal import SLURM_NNODES as SLURM_NNODES
from nvrx_otel.envexternal import SLURM_NODEID as SLURM_NODEID
from nvrx_otel.envexternal import SLURM_PROCID as SLURM_PROCID
from nvrx_otel.envexternal import TORCHELASTIC_RESTART_COUNT as TORCHELASTIC_RESTART_COUNT
from nvrx_otel.envexternal import TORCHELASTIC_RUN_ID as TORCHELASTIC_RUN_ID
from nvrx_otel.envexternal import TRACEPARENT as TRACEPARENT
from nvrx_otel.envexternal import TRACESTATE as TRACESTATE
from nvrx_otel.envexternal import WORLD_SIZE as WORLD_SIZE
from nvrx_otel.envexternal import XDG_CONFIG_HOME as XDG_CONFIG_HOME

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
