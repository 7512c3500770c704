"""The settings table's rows for variables other tools define: LogFlow's (kept by the loguru
front end), the launchers' (rank, size and job identity) and OpenTelemetry's.

Part of the one settings table: ``env.py`` re-exports every name here, after its own rows,
so :data:`nvrx_otel.env.SETTINGS` holds them in this order and code names them as
``env.<NAME>`` like any other setting.
"""

from __future__ import annotations

from typing import Final

from nvrx_otel.envparse import (
    Setting,
    parse_any,
    parse_nonneg_int,
    parse_path,
    parse_text,
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
    """Boolean: the run file is written by a background thread of nvrx-otel's in each rank's
main process (not loguru's ``enqueue``, which deadlocks with ``fork``); child processes
write their lines directly. Records still reach the spool at the call site. Default:
false.""",
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
NVRX_OTEL_LOGURU_FILE_PER: Final = "NVRX_OTEL_LOGURU_FILE_PER"
Setting(
    NVRX_OTEL_LOGURU_FILE_PER,
    parse_text,
    None,
    """``rank`` or ``worker``: with ``worker``, every process other than a rank's main
process (dataloader workers, spawned or forked children) writes its own run file
``<script>[.rank<N>].worker<pid>.log``. Default: rank.""",
)
NVRX_OTEL_LOGURU_FILE_FORMAT: Final = "NVRX_OTEL_LOGURU_FILE_FORMAT"
Setting(
    NVRX_OTEL_LOGURU_FILE_FORMAT,
    parse_text,
    None,
    """``text`` (LogFlow's line) or ``json`` (one JSON object per line) for the run file.
Default: text.""",
)
NVRX_OTEL_LOGURU_ROTATION_SIZE: Final = "NVRX_OTEL_LOGURU_ROTATION_SIZE"
Setting(
    NVRX_OTEL_LOGURU_ROTATION_SIZE,
    parse_text,
    None,
    """Archive the run file while running before a line would take it past this size, in
loguru's units: ``100 MB`` (decimal: 10**8 bytes), ``100 MiB`` (binary), ``512 KB``,
``2 GB``, bytes without a unit. Invalid: said once on stderr and ignored. Default: unset,
no rotation by size.""",
)
NVRX_OTEL_LOGURU_ROTATION_INTERVAL: Final = "NVRX_OTEL_LOGURU_ROTATION_INTERVAL"
Setting(
    NVRX_OTEL_LOGURU_ROTATION_INTERVAL,
    parse_text,
    None,
    """Archive the run file while running once it is this old (``30 s``, ``15 min``, ``6 h``,
``1 d``, ``1 week``, ``1 h 30 min``). Invalid: said once on stderr and ignored. Default:
unset, no rotation by time.""",
)
NVRX_OTEL_LOGURU_COMPRESSION: Final = "NVRX_OTEL_LOGURU_COMPRESSION"
Setting(
    NVRX_OTEL_LOGURU_COMPRESSION,
    parse_text,
    None,
    """``gz`` or ``none``: compress the run file's archives with gzip. Default: none.""",
)
NVRX_OTEL_LOGURU_RELOAD_SIGNAL: Final = "NVRX_OTEL_LOGURU_RELOAD_SIGNAL"
Setting(
    NVRX_OTEL_LOGURU_RELOAD_SIGNAL,
    parse_text,
    None,
    """A signal name (``SIGRTMIN+3``, ``SIGHUP`` ...) that reconfigures the loguru front end
while running (see ``NVRX_OTEL_LOGURU_RELOAD_ACTION``); send it to the rank processes.
Default: unset, off (``SIGUSR1`` is Slurm's and Lightning's requeue signal and refused;
``SIGUSR2`` is submitit's warning signal and torchrun stops the job on ``SIGHUP`` sent to
it: ``SIGRTMIN+3`` no launcher uses).""",
)
NVRX_OTEL_LOGURU_RELOAD_ACTION: Final = "NVRX_OTEL_LOGURU_RELOAD_ACTION"
Setting(
    NVRX_OTEL_LOGURU_RELOAD_ACTION,
    parse_text,
    None,
    """What the reload signal does: ``debug`` toggles the file and console levels between
DEBUG and the configured ones; ``reload`` reads the configuration files and the
environment again and applies their levels (``file_level``, ``console_level``,
``module_levels``). Default: debug.""",
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
SLURM_NODEID: Final = "SLURM_NODEID"
Setting(
    SLURM_NODEID,
    parse_nonneg_int,
    None,
    """Slurm node index in the job step (``nvrx-otel run`` prints the verdict on node 0).""",
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
OTEL_EXPERIMENTAL_RESOURCE_DETECTORS: Final = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"
Setting(
    OTEL_EXPERIMENTAL_RESOURCE_DETECTORS,
    parse_any,
    None,
    """Resource detectors beyond the SDK's built-in ones, comma-separated (OpenTelemetry). When
it names one, every resource (the SDK's and the spool headers') comes from the SDK's
``Resource.create`` with them; otherwise it is made without loading the SDK.""",
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
    """CA bundle (PEM) to verify an ``https://`` endpoint's certificate (a file that cannot be
read is an error naming it). Default: the system's trust store (``SSL_CERT_FILE`` replaces
it) and certifi's bundle; without a CA file an ``https://`` endpoint is still TLS.""",
)
OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: Final = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
Setting(
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    parse_text,
    None,
    """Client certificate (PEM) for mutual TLS; a file that cannot be read is an error naming
it. Default: none.""",
)
OTEL_EXPORTER_OTLP_CLIENT_KEY: Final = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
Setting(
    OTEL_EXPORTER_OTLP_CLIENT_KEY,
    parse_text,
    None,
    """Client private key (PEM) for mutual TLS; a file that cannot be read is an error naming
it. Default: none (the key is in the client certificate's file).""",
)
OTEL_EXPORTER_OTLP_INSECURE: Final = "OTEL_EXPORTER_OTLP_INSECURE"
Setting(
    OTEL_EXPORTER_OTLP_INSECURE,
    parse_text,
    None,
    """``true``: a gRPC endpoint given as ``host:port`` (no scheme) is cleartext (OpenTelemetry's
meaning; ``http://`` is always cleartext, ``https://`` always TLS). Default: false (TLS).""",
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
OTEL_PYTHON_DISTRO: Final = "OTEL_PYTHON_DISTRO"
Setting(
    OTEL_PYTHON_DISTRO,
    parse_text,
    None,
    """Distro ``opentelemetry-instrument`` loads (opentelemetry-instrumentation); ``nvrx_otel``
selects nvrx-otel's. Default: the first installed one.""",
)
OTEL_PYTHON_CONFIGURATOR: Final = "OTEL_PYTHON_CONFIGURATOR"
Setting(
    OTEL_PYTHON_CONFIGURATOR,
    parse_text,
    None,
    """Configurator ``opentelemetry-instrument`` runs (opentelemetry-instrumentation).
Default: ``nvrx_otel`` when nvrx-otel's distro is loaded, else the first installed one.""",
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
