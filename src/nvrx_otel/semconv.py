"""Semantic conventions of nvrx-otel: span groups, span kinds and attribute keys.

GENERATED from ``model/`` by ``python -m nvrx_otel._generate``. Do not edit by hand:
edit the registry and regenerate (a test fails when this file drifts from it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.44.0"
"""Schema URL of the OpenTelemetry semantic-conventions release the attributes follow (the ``schema_url`` of resources and instrumentation scopes)."""

# --- span groups (instrumentation scopes) ---------------------------------------------

SPAN_GROUP_CKPT: Final = "nv.nvrx.ckpt"
"""Checkpoint scheduling, worker request, and finalization spans."""

SPAN_GROUP_CKPT_PHASES: Final = "nv.nvrx.ckpt.save"
"""Checkpoint stage and completion synchronization spans."""

SPAN_GROUP_FT: Final = "nv.nvrx.ftl"
"""Fault-tolerance operation spans."""

SPAN_GROUP_STARTUP: Final = "nv.nvrx.ftl.python"
"""Process startup and import spans."""


# --- attribute keys ------------------------------------------------------------------

CKPT_BYTES: Final = "nv.nvrx.ckpt.bytes"
"""Number of bytes written (or staged) by the checkpoint operation."""

CKPT_CALL_IDX: Final = "nv.nvrx.ckpt.call_idx"
"""Attribute key for the queue-local index shared by schedule, request, and finalize spans."""

CKPT_ITERATION: Final = "nv.nvrx.ckpt.iteration"
"""Training iteration the checkpoint belongs to."""

CKPT_PATH: Final = "nv.nvrx.ckpt.path"
"""Destination path of the checkpoint."""

CKPT_STRATEGY: Final = "nv.nvrx.ckpt.strategy"
"""Checkpoint save strategy as named by the framework."""

DEDUP_COUNT: Final = "nv.nvrx.dedup.count"
"""Number of identical records (same level, logger, call site, message and attributes; one per rank) from ranks of one node that the aggregator's de-duplication window (--dedup-window) collapsed into this one record."""

DEDUP_FIRST_TIME: Final = "nv.nvrx.dedup.first_time"
"""Timestamp (ns since the epoch) of the earliest record a collapsed record stands for; the record's own time is this one."""

DEDUP_LAST_TIME: Final = "nv.nvrx.dedup.last_time"
"""Timestamp (ns since the epoch) of the latest record a collapsed record stands for."""

DEDUP_RANKS: Final = "nv.nvrx.dedup.ranks"
"""Workload ranks whose records a collapsed record stands for, sorted, runs written as ranges."""

DROP_COUNT: Final = "nv.nvrx.drop.count"
"""Number of records a drop or corruption report accounts for."""

DROP_PID: Final = "nv.nvrx.drop.pid"
"""Process id of the writer whose records were dropped."""

DROP_RANK: Final = "nv.nvrx.drop.rank"
"""Workload rank of the writer whose records were dropped (absent when unknown)."""

DROP_REASON: Final = "nv.nvrx.drop.reason"
"""Why records were dropped."""

INFRA_LOCAL_RANK: Final = "nv.nvrx.infra.local_rank"
"""Infrastructure local rank on the node (SLURM_LOCALID)."""

INFRA_RANK: Final = "nv.nvrx.infra.rank"
"""Infrastructure rank; for SLURM job arrays SLURM_ARRAY_TASK_ID * SLURM_NNODES + SLURM_PROCID, else SLURM_PROCID."""

JOB_ARRAY_TASK_ID: Final = "nv.nvrx.job.array_task_id"
"""SLURM job-array task id (SLURM_ARRAY_TASK_ID)."""

JOB_ID: Final = "nv.nvrx.job.id"
"""Job identifier; NVRX_OTEL_JOB_ID, else SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID for array tasks, else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID."""

NODE_ID: Final = "nv.nvrx.node.id"
"""Node identifier used in node log names and records (NVRX_OTEL_NODE_ID, else the host name)."""

PROCESS_OUTCOME: Final = "nv.nvrx.process.outcome"
"""How the process ended, as far as its node can know."""

PROCESS_SIGNAL: Final = "nv.nvrx.process.signal"
"""The signal a record is about (the one that killed the process, or the one whose receipt made it record its stacks)."""

PROCESS_STACKS: Final = "nv.nvrx.process.stacks"
"""Why the record holds the Python stack of every thread of the process (in exception.stacktrace)."""

PROCESS_UNCAUGHT: Final = "nv.nvrx.process.uncaught"
"""The thread an uncaught exception ended (main, or the thread's name)."""

RECORD_KEY: Final = "nv.nvrx.record.key"
"""Per-record de-duplication key, the same value as log.record.uid. Deprecated: use ``log.record.uid``. Emitted with the same value as log.record.uid until the next release, then no more."""

RESTART_CYCLE: Final = "nv.nvrx.restart.cycle"
"""Restart cycle of the job, 0 for the first run (TORCHELASTIC_RESTART_COUNT, or the fault-tolerance launcher's cycle)."""

RUN_EXPERIMENT: Final = "nv.nvrx.run.experiment"
"""Experiment the run belongs to (run tag experiment)."""

RUN_ID: Final = "nv.nvrx.run.id"
"""Identifier of the run (run tag run_id)."""

RUN_TAG: Final = "nv.nvrx.run.tag"
"""Prefix of every other run tag, as nv.nvrx.run.tag.<key> (run tag <key>=<value>)."""

SPAN_TRUNCATED: Final = "nv.nvrx.span.truncated"
"""True on a span the aggregator ended because its writer died before ending it."""

WORKLOAD_GROUP_RANK: Final = "nv.nvrx.workload.group_rank"
"""Rank of this node's worker group (GROUP_RANK from torchrun)."""

WORKLOAD_LOCAL_RANK: Final = "nv.nvrx.workload.local_rank"
"""Rank of the process among the workload processes on its node (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID)."""

WORKLOAD_LOCAL_WORLD_SIZE: Final = "nv.nvrx.workload.local_world_size"
"""Number of workload processes on this node (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS)."""

WORKLOAD_RANK: Final = "nv.nvrx.workload.rank"
"""Global rank of the process in the workload (RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, PMI_ID)."""

WORKLOAD_WORLD_SIZE: Final = "nv.nvrx.workload.world_size"
"""Number of workload processes in the job (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE)."""

CODE_FILE_PATH: Final = "code.file.path"
"""Source file of the logging call. (OpenTelemetry, stable)"""

CODE_FUNCTION_NAME: Final = "code.function.name"
"""Function of the logging call. (OpenTelemetry, stable)"""

CODE_LINE_NUMBER: Final = "code.line.number"
"""Line number of the logging call. (OpenTelemetry, stable)"""

ERROR_TYPE: Final = "error.type"
"""Class of error an operation ended with. (OpenTelemetry, stable)"""

EXCEPTION_MESSAGE: Final = "exception.message"
"""Message of the exception. (OpenTelemetry, stable)"""

EXCEPTION_STACKTRACE: Final = "exception.stacktrace"
"""Stack trace of the exception as text. (OpenTelemetry, stable)"""

EXCEPTION_TYPE: Final = "exception.type"
"""Type of the exception. (OpenTelemetry, stable)"""

HOST_NAME: Final = "host.name"
"""Host name of the machine. (OpenTelemetry, development)"""

LOG_IOSTREAM: Final = "log.iostream"
"""The stream (stdout or stderr) a captured line was written to. (OpenTelemetry, development)"""

LOG_RECORD_UID: Final = "log.record.uid"
"""Per-record de-duplication key, the writer's random 64-bit id and its sequence number as `<16 hex>-<hex seq>`; unique per record and the same on re-delivery. (OpenTelemetry, development)"""

PROCESS_EXIT_CODE: Final = "process.exit.code"
"""The exit code of a process that exited, when its node saw it. (OpenTelemetry, development)"""

PROCESS_PID: Final = "process.pid"
"""Process identifier. (OpenTelemetry, development)"""

SERVICE_INSTANCE_ID: Final = "service.instance.id"
"""A random UUID (version 4) per process; job, node and pid are in nv.nvrx.job.id, nv.nvrx.node.id and process.pid. (OpenTelemetry, stable)"""

SERVICE_NAME: Final = "service.name"
"""Logical name of the service (OTEL_SERVICE_NAME; the OpenTelemetry SDK's resource sets it). (OpenTelemetry, stable)"""

TELEMETRY_SDK_LANGUAGE: Final = "telemetry.sdk.language"
"""Language of the telemetry SDK (python). (OpenTelemetry, stable)"""

TELEMETRY_SDK_NAME: Final = "telemetry.sdk.name"
"""Name of the telemetry SDK (opentelemetry), on every resource, the spool path's too. (OpenTelemetry, stable)"""

TELEMETRY_SDK_VERSION: Final = "telemetry.sdk.version"
"""Version of the telemetry SDK (the installed opentelemetry-sdk's). (OpenTelemetry, stable)"""

THREAD_ID: Final = "thread.id"
"""Current thread id. (OpenTelemetry, development)"""

THREAD_NAME: Final = "thread.name"
"""Current thread name. (OpenTelemetry, development)"""


class DropReasonValues(str, Enum):
    """Values of ``nv.nvrx.drop.reason``."""

    BUDGET = "budget"
    """The writer's spool budget was exceeded."""

    ROTATION = "rotation"
    """Node-log rotation deleted a backup that held these records."""

    CORRUPT = "corrupt"
    """Bytes in the spool were not a complete, decodable record."""

    WRITE_ERROR = "write_error"
    """The writer could not append the record (full disk, removed directory)."""

    OTLP_BACKLOG = "otlp_backlog"
    """Records dropped from the OTLP backlog under spool-budget pressure after the node log had them."""

    CAPTURE_BACKLOG = "capture_backlog"
    """Lines of captured stdout/stderr the watcher could not record as fast as the process wrote them (they still reached the original destination)."""

    OTLP_REJECTED = "otlp_rejected"
    """Records the OTLP endpoint refused for good (an HTTP 4xx or gRPC error not worth a retry) or rejected in a partial success, after the node log had them."""


class ProcessOutcomeValues(str, Enum):
    """Values of ``nv.nvrx.process.outcome``."""

    EXIT = "exit"
    """The process exited (process.exit.code when it was seen; 0 is a clean exit)."""

    EXCEPTION = "exception"
    """An uncaught exception ended the process."""

    SIGNAL = "signal"
    """A signal killed the process (nv.nvrx.process.signal)."""

    VANISHED = "vanished"
    """The process died without an exit status, exception or signal seen, as SIGKILL and the OOM killer leave it."""


class ProcessStacksValues(str, Enum):
    """Values of ``nv.nvrx.process.stacks``."""

    FATAL = "fatal"
    """The process dies of a fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL)."""

    TERMINATE = "terminate"
    """The process received SIGTERM."""

    REQUESTED = "requested"
    """The process received the stacks signal (NVRX_OTEL_STACKS_SIGNAL) and carries on."""


# --- span kinds ----------------------------------------------------------------------


class CkptSpanKind(str, Enum):
    """Span kinds of the ``nv.nvrx.ckpt`` group."""

    SCHEDULE = "schedule"
    """The trainer schedules a checkpoint save."""

    REQUEST = "request"
    """A checkpoint worker serves the save request."""

    FINALIZE = "finalize"
    """The trainer finalizes a completed checkpoint."""


class CkptSaveSpanKind(str, Enum):
    """Span kinds of the ``nv.nvrx.ckpt.save`` group."""

    STAGE_WAIT = "stage_wait"
    """Waiting for a free staging buffer."""

    SHM_DRAIN = "shm_drain"
    """Draining shared memory of a previous save."""

    STAGE = "stage"
    """Copying device tensors to host staging memory."""

    PRELOAD = "preload"
    """Preloading tensors for the writer."""

    WRITE = "write"
    """Writing checkpoint bytes to storage."""

    COMPLETION_SYNC = "completion_sync"
    """Synchronising completion of the save across ranks."""


class FtSpanKind(str, Enum):
    """Span kinds of the ``nv.nvrx.ftl`` group."""

    CYCLE_START = "cycle_start"
    """The launcher begins a restart cycle."""

    CYCLE = "cycle"
    """One restart cycle of the job, parent of the workers' spans in that cycle."""

    AWAIT_ROUND = "await_round"
    """Waiting for the rendezvous round to open."""

    RENDEZVOUS = "rendezvous"
    """Rendezvous of the nodes taking part in the cycle."""

    HEALTH_CHECK = "health_check"
    """Node health check before launching workers."""

    WORKER_LAUNCH = "worker_launch"
    """Launching the worker processes."""

    RUN_START = "run_start"
    """From worker launch until the workload reports it is running."""

    RUN = "run"
    """The workload running."""

    FAULT = "fault"
    """Handling a detected fault."""

    TEARDOWN = "teardown"
    """Tearing the workers down."""

    ATTRIBUTION = "attribution"
    """Attributing a fault to a rank, node or cause."""


class StartupSpanKind(str, Enum):
    """Span kinds of the ``nv.nvrx.ftl.python`` group."""

    STARTUP = "startup"
    """From the process's start (read from the OS) until telemetry was set up."""

    IMPORTS = "imports"
    """Time spent importing a set of modules."""


SPAN_CKPT_SCHEDULE: Final = "nv.nvrx.ckpt.schedule"
"""The trainer schedules a checkpoint save."""

SPAN_CKPT_REQUEST: Final = "nv.nvrx.ckpt.request"
"""A checkpoint worker serves the save request."""

SPAN_CKPT_FINALIZE: Final = "nv.nvrx.ckpt.finalize"
"""The trainer finalizes a completed checkpoint."""

SPAN_CKPT_SAVE_STAGE_WAIT: Final = "nv.nvrx.ckpt.save.stage_wait"
"""Waiting for a free staging buffer."""

SPAN_CKPT_SAVE_SHM_DRAIN: Final = "nv.nvrx.ckpt.save.shm_drain"
"""Draining shared memory of a previous save."""

SPAN_CKPT_SAVE_STAGE: Final = "nv.nvrx.ckpt.save.stage"
"""Copying device tensors to host staging memory."""

SPAN_CKPT_SAVE_PRELOAD: Final = "nv.nvrx.ckpt.save.preload"
"""Preloading tensors for the writer."""

SPAN_CKPT_SAVE_WRITE: Final = "nv.nvrx.ckpt.save.write"
"""Writing checkpoint bytes to storage."""

SPAN_CKPT_SAVE_COMPLETION_SYNC: Final = "nv.nvrx.ckpt.save.completion_sync"
"""Synchronising completion of the save across ranks."""

SPAN_FTL_CYCLE_START: Final = "nv.nvrx.ftl.cycle_start"
"""The launcher begins a restart cycle."""

SPAN_FTL_CYCLE: Final = "nv.nvrx.ftl.cycle"
"""One restart cycle of the job, parent of the workers' spans in that cycle."""

SPAN_FTL_AWAIT_ROUND: Final = "nv.nvrx.ftl.await_round"
"""Waiting for the rendezvous round to open."""

SPAN_FTL_RENDEZVOUS: Final = "nv.nvrx.ftl.rendezvous"
"""Rendezvous of the nodes taking part in the cycle."""

SPAN_FTL_HEALTH_CHECK: Final = "nv.nvrx.ftl.health_check"
"""Node health check before launching workers."""

SPAN_FTL_WORKER_LAUNCH: Final = "nv.nvrx.ftl.worker_launch"
"""Launching the worker processes."""

SPAN_FTL_RUN_START: Final = "nv.nvrx.ftl.run_start"
"""From worker launch until the workload reports it is running."""

SPAN_FTL_RUN: Final = "nv.nvrx.ftl.run"
"""The workload running."""

SPAN_FTL_FAULT: Final = "nv.nvrx.ftl.fault"
"""Handling a detected fault."""

SPAN_FTL_TEARDOWN: Final = "nv.nvrx.ftl.teardown"
"""Tearing the workers down."""

SPAN_FTL_ATTRIBUTION: Final = "nv.nvrx.ftl.attribution"
"""Attributing a fault to a rank, node or cause."""

SPAN_FTL_PYTHON_STARTUP: Final = "nv.nvrx.ftl.python.startup"
"""From the process's start (read from the OS) until telemetry was set up."""

SPAN_FTL_PYTHON_IMPORTS: Final = "nv.nvrx.ftl.python.imports"
"""Time spent importing a set of modules."""


# --- metrics -------------------------------------------------------------------------

METRIC_AGGREGATOR_RECORDS: Final = "nv.nvrx.aggregator.records"
"""Records the aggregator wrote to the node log (records and loss reports). (counter, unit ``{record}``)"""

METRIC_AGGREGATOR_DROPPED: Final = "nv.nvrx.aggregator.dropped"
"""Records reported dropped (writers' budget and write errors, rotation, OTLP backlog). (counter, unit ``{record}``)"""

METRIC_AGGREGATOR_CORRUPT: Final = "nv.nvrx.aggregator.corrupt"
"""Spool lines reported corrupt. (counter, unit ``{record}``)"""

METRIC_AGGREGATOR_BACKLOG: Final = "nv.nvrx.aggregator.backlog"
"""Bytes of spool files not yet in the node log. (gauge, unit ``By``)"""

METRIC_AGGREGATOR_LAG: Final = "nv.nvrx.aggregator.lag"
"""Age of the newest record written while a backlog remains (0 when caught up). (gauge, unit ``s``)"""

METRIC_AGGREGATOR_RATE: Final = "nv.nvrx.aggregator.rate"
"""Records written per second since the previous export. (gauge, unit ``{record}/s``)"""

METRIC_AGGREGATOR_OTLP_EXPORTED: Final = "nv.nvrx.aggregator.otlp.exported"
"""Log records and spans the OTLP endpoint acknowledged. (counter, unit ``{record}``)"""


@dataclass(frozen=True)
class SpanDef:
    """One span of the conventions: its group (the tracer name), kind and full name."""

    group: str
    kind: str
    name: str
    required: tuple[str, ...]
    recommended: tuple[str, ...]


def span_def(group: str, kind: str | Enum) -> SpanDef:
    """Look up the span of ``group`` and ``kind``; KeyError names an unknown pair."""
    kind_name = kind.value if isinstance(kind, Enum) else kind
    try:
        return SPANS[f"{group}.{kind_name}"]
    except KeyError:
        raise KeyError(f"no span kind {kind_name!r} in span group {group!r}") from None


SPANS: Final[Mapping[str, SpanDef]] = MappingProxyType(
    {
        SPAN_CKPT_SCHEDULE: SpanDef(
            group=SPAN_GROUP_CKPT,
            kind="schedule",
            name=SPAN_CKPT_SCHEDULE,
            required=(CKPT_CALL_IDX,),
            recommended=(CKPT_ITERATION,),
        ),
        SPAN_CKPT_REQUEST: SpanDef(
            group=SPAN_GROUP_CKPT,
            kind="request",
            name=SPAN_CKPT_REQUEST,
            required=(CKPT_CALL_IDX,),
            recommended=(CKPT_PATH,),
        ),
        SPAN_CKPT_FINALIZE: SpanDef(
            group=SPAN_GROUP_CKPT,
            kind="finalize",
            name=SPAN_CKPT_FINALIZE,
            required=(CKPT_CALL_IDX,),
            recommended=(),
        ),
        SPAN_CKPT_SAVE_STAGE_WAIT: SpanDef(
            group=SPAN_GROUP_CKPT_PHASES,
            kind="stage_wait",
            name=SPAN_CKPT_SAVE_STAGE_WAIT,
            required=(),
            recommended=(),
        ),
        SPAN_CKPT_SAVE_SHM_DRAIN: SpanDef(
            group=SPAN_GROUP_CKPT_PHASES,
            kind="shm_drain",
            name=SPAN_CKPT_SAVE_SHM_DRAIN,
            required=(),
            recommended=(),
        ),
        SPAN_CKPT_SAVE_STAGE: SpanDef(
            group=SPAN_GROUP_CKPT_PHASES,
            kind="stage",
            name=SPAN_CKPT_SAVE_STAGE,
            required=(),
            recommended=(CKPT_BYTES,),
        ),
        SPAN_CKPT_SAVE_PRELOAD: SpanDef(
            group=SPAN_GROUP_CKPT_PHASES,
            kind="preload",
            name=SPAN_CKPT_SAVE_PRELOAD,
            required=(),
            recommended=(),
        ),
        SPAN_CKPT_SAVE_WRITE: SpanDef(
            group=SPAN_GROUP_CKPT_PHASES,
            kind="write",
            name=SPAN_CKPT_SAVE_WRITE,
            required=(),
            recommended=(CKPT_BYTES, CKPT_PATH, CKPT_STRATEGY),
        ),
        SPAN_CKPT_SAVE_COMPLETION_SYNC: SpanDef(
            group=SPAN_GROUP_CKPT_PHASES,
            kind="completion_sync",
            name=SPAN_CKPT_SAVE_COMPLETION_SYNC,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_CYCLE_START: SpanDef(
            group=SPAN_GROUP_FT,
            kind="cycle_start",
            name=SPAN_FTL_CYCLE_START,
            required=(RESTART_CYCLE,),
            recommended=(),
        ),
        SPAN_FTL_CYCLE: SpanDef(
            group=SPAN_GROUP_FT,
            kind="cycle",
            name=SPAN_FTL_CYCLE,
            required=(RESTART_CYCLE,),
            recommended=(),
        ),
        SPAN_FTL_AWAIT_ROUND: SpanDef(
            group=SPAN_GROUP_FT,
            kind="await_round",
            name=SPAN_FTL_AWAIT_ROUND,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_RENDEZVOUS: SpanDef(
            group=SPAN_GROUP_FT,
            kind="rendezvous",
            name=SPAN_FTL_RENDEZVOUS,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_HEALTH_CHECK: SpanDef(
            group=SPAN_GROUP_FT,
            kind="health_check",
            name=SPAN_FTL_HEALTH_CHECK,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_WORKER_LAUNCH: SpanDef(
            group=SPAN_GROUP_FT,
            kind="worker_launch",
            name=SPAN_FTL_WORKER_LAUNCH,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_RUN_START: SpanDef(
            group=SPAN_GROUP_FT,
            kind="run_start",
            name=SPAN_FTL_RUN_START,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_RUN: SpanDef(
            group=SPAN_GROUP_FT,
            kind="run",
            name=SPAN_FTL_RUN,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_FAULT: SpanDef(
            group=SPAN_GROUP_FT,
            kind="fault",
            name=SPAN_FTL_FAULT,
            required=(),
            recommended=(ERROR_TYPE,),
        ),
        SPAN_FTL_TEARDOWN: SpanDef(
            group=SPAN_GROUP_FT,
            kind="teardown",
            name=SPAN_FTL_TEARDOWN,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_ATTRIBUTION: SpanDef(
            group=SPAN_GROUP_FT,
            kind="attribution",
            name=SPAN_FTL_ATTRIBUTION,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_PYTHON_STARTUP: SpanDef(
            group=SPAN_GROUP_STARTUP,
            kind="startup",
            name=SPAN_FTL_PYTHON_STARTUP,
            required=(),
            recommended=(),
        ),
        SPAN_FTL_PYTHON_IMPORTS: SpanDef(
            group=SPAN_GROUP_STARTUP,
            kind="imports",
            name=SPAN_FTL_PYTHON_IMPORTS,
            required=(),
            recommended=(),
        ),
    }
)
"""Every span of the conventions by span name."""

SPAN_KINDS: Final[Mapping[str, type[Enum]]] = MappingProxyType(
    {
        SPAN_GROUP_CKPT: CkptSpanKind,
        SPAN_GROUP_CKPT_PHASES: CkptSaveSpanKind,
        SPAN_GROUP_FT: FtSpanKind,
        SPAN_GROUP_STARTUP: StartupSpanKind,
    }
)
"""The Enum of span kinds of each span group."""
