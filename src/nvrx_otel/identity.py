"""Who this process is in the job: ranks, sizes, node and job, resolved once per process.

Precedence (first variable present wins):

- workload rank: RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, PMI_ID (MPICH's
  ``mpiexec -pmi-port``)
- workload local rank: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID
- world size: WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE
- local world size: LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS
- group rank: GROUP_RANK (torchrun)
- infra rank: SLURM_ARRAY_TASK_ID * SLURM_NNODES (or SLURM_JOB_NUM_NODES) + SLURM_PROCID
  for array tasks, else SLURM_PROCID; infra local rank: SLURM_LOCALID
- job id: NVRX_OTEL_JOB_ID, else SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID for array tasks,
  else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID, else none; restart cycle: TORCHELASTIC_RESTART_COUNT
- node id: NVRX_OTEL_NODE_ID, else the host name

PMIx launchers export only PMIX_RANK and PMIX_NAMESPACE (plus PMIx server contact
variables) to the environment; local rank and sizes are PMIx keys, so under plain PMIx
they stay unknown unless the launcher (Slurm, Open MPI) exports its own variables too.

An explicit override (:func:`set_identity`, for ``mp.spawn``-style jobs that pass ranks as
arguments) wins over the environment and is inherited by forked children.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.util.types import AttributeValue

from nvrx_otel import env, otelresource, semconv
from nvrx_otel.envparse import INT64_MAX, warn_once

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

_CONSEQUENCE = "treating it as unknown"


@dataclass(frozen=True)
class Identity:
    """One process's place in the job. ``None`` means unknown."""

    workload_rank: int | None
    workload_local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    group_rank: int | None
    infra_rank: int | None
    infra_local_rank: int | None
    node_id: str
    job_id: str | None
    array_task_id: int | None
    restart_cycle: int | None
    host_name: str
    pid: int
    run_tags: tuple[tuple[str, str], ...] = ()
    """Run tags (``NVRX_OTEL_RUN_TAGS``, :func:`nvrx_otel.set_run_tags`), in order."""

    def attributes(self) -> dict[str, AttributeValue]:
        """The resource attributes of this identity (unknown values left out)."""
        pairs: list[tuple[str, AttributeValue | None]] = [
            (semconv.WORKLOAD_RANK, self.workload_rank),
            (semconv.WORKLOAD_LOCAL_RANK, self.workload_local_rank),
            (semconv.WORKLOAD_WORLD_SIZE, self.world_size),
            (semconv.WORKLOAD_LOCAL_WORLD_SIZE, self.local_world_size),
            (semconv.WORKLOAD_GROUP_RANK, self.group_rank),
            (semconv.INFRA_RANK, self.infra_rank),
            (semconv.INFRA_LOCAL_RANK, self.infra_local_rank),
            (semconv.NODE_ID, self.node_id),
            (semconv.JOB_ID, self.job_id),
            (semconv.JOB_ARRAY_TASK_ID, self.array_task_id),
            (semconv.RESTART_CYCLE, self.restart_cycle),
            (semconv.HOST_NAME, self.host_name),
            (semconv.PROCESS_PID, self.pid),
            (semconv.SERVICE_INSTANCE_ID, instance_id()),
        ]
        pairs += [(run_tag_key(k), v) for k, v in self.run_tags]
        return {k: v for k, v in pairs if v is not None}

    def resource_attributes(self) -> dict[str, AttributeValue]:
        """This process's resource attributes, the same on every path: the SDK defaults,
        OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME merged as the SDK's
        ``Resource.create`` does, with the identity attributes taking precedence
        (:mod:`nvrx_otel.otelresource`). Spool writers put them in their headers."""
        return otelresource.resource_attributes(self.attributes())

    def resource(self) -> Resource:
        """An OTel Resource of :meth:`resource_attributes`, with the schema URL of the
        semantic conventions they follow.

        The SDK's resources module (and the ~15 modules it imports) is loaded here, by
        tracing setup and the aggregator, not by a rank that only logs."""
        from opentelemetry.sdk.resources import Resource

        return Resource(self.resource_attributes(), schema_url=semconv.SCHEMA_URL)


_instance_id = str(uuid.uuid4())


def instance_id() -> str:
    """This process's ``service.instance.id``: a random (version 4) UUID, as the semantic
    conventions recommend, made once per process (a forked child makes its own in its fork
    hook). Job, node and pid are attributes of their own."""
    return _instance_id


_RUN_TAG_KEYS: Final = {"experiment": semconv.RUN_EXPERIMENT, "run_id": semconv.RUN_ID}


def run_tag_key(key: str) -> str:
    """The attribute key of run tag ``key``: ``experiment`` and ``run_id`` have their own,
    any other is ``nv.nvrx.run.tag.<key>``."""
    return _RUN_TAG_KEYS.get(key) or f"{semconv.RUN_TAG}.{key}"


_OVERRIDABLE = frozenset(f.name for f in fields(Identity)) - {"pid", "host_name"}


# --- the identity fields every record carries ------------------------------------------------


@dataclass(frozen=True)
class IdentityField:
    """One identity field repeated in every spool record."""

    key: str
    """Its key in a spool record."""
    attr: str
    """The :class:`Identity` attribute it comes from."""
    resource_key: str
    """Its resource attribute (semantic convention) in spool headers and OTLP."""
    meaning: str
    """What it is, and where the node log shows it (NVRx's line format)."""


IDENTITY_FIELDS: Final = (
    IdentityField("node", "node_id", semconv.NODE_ID, "node id: ``[<node id>]``"),
    IdentityField("job", "job_id", semconv.JOB_ID, "job id: the spool directory's name"),
    IdentityField("rank", "workload_rank", semconv.WORKLOAD_RANK, "``workload:<rank>``"),
    IdentityField(
        "lrank", "workload_local_rank", semconv.WORKLOAD_LOCAL_RANK, "``workload:r(<local>)``"
    ),
    IdentityField("irank", "infra_rank", semconv.INFRA_RANK, "``infra:<rank>``"),
    IdentityField("ilrank", "infra_local_rank", semconv.INFRA_LOCAL_RANK, "``infra:r(<local>)``"),
)
"""The identity fields of a record, in the order a record holds them (absent = unknown)."""

RECORD_KEYS: Final = tuple(f.key for f in IDENTITY_FIELDS)
"""The record keys of the identity fields."""


def record_fields(ident: Identity) -> dict[str, Any]:
    """The known identity fields of ``ident`` under their record keys, in table order."""
    out: dict[str, Any] = {}
    for f in IDENTITY_FIELDS:
        value = getattr(ident, f.attr)
        if value is not None:
            out[f.key] = value
    return out


def record_fields_of(source: Mapping[str, Any]) -> dict[str, Any]:
    """The identity fields present in a record (or any mapping with record keys)."""
    return {k: source[k] for k in RECORD_KEYS if k in source}


def record_fields_from_resource(resource: Mapping[str, Any]) -> dict[str, Any]:
    """The identity fields under their record keys from resource attributes (a spool
    header's ``res``)."""
    return {f.key: resource[f.resource_key] for f in IDENTITY_FIELDS if f.resource_key in resource}


def _first_int(environ: Mapping[str, str], names: tuple[str, ...], strict: bool) -> int | None:
    for name in names:
        if environ.get(name, "").strip():
            return env.read(
                name,
                env.parse_nonneg_int,
                None,
                environ=environ,
                strict=strict,
                consequence=_CONSEQUENCE,
            )
    return None


def _int(environ: Mapping[str, str], name: str, strict: bool) -> int | None:
    return _first_int(environ, (name,), strict)


def _text(environ: Mapping[str, str], name: str, strict: bool) -> str | None:
    return env.read(
        name, env.parse_text, None, environ=environ, strict=strict, consequence=_CONSEQUENCE
    )


def resolve(
    environ: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
    host_name: str | None = None,
    pid: int | None = None,
    **overrides: Any,
) -> Identity:
    """Resolve the identity from ``environ`` (default ``os.environ``), without caching.

    ``strict=True`` raises ``ValueError`` naming a malformed variable and its value;
    otherwise that variable is reported once on stderr and treated as unknown.
    ``overrides`` (field names of :class:`Identity`) win over the environment.
    """
    e = os.environ if environ is None else environ
    host = host_name if host_name is not None else socket.gethostname()
    procid = _int(e, env.SLURM_PROCID, strict)
    task = _int(e, env.SLURM_ARRAY_TASK_ID, strict)
    nnodes = _first_int(e, (env.SLURM_NNODES, env.SLURM_JOB_NUM_NODES), strict)
    infra_rank = procid
    if task is not None and nnodes is not None and procid is not None:
        infra_rank = _in_range(
            f"{env.SLURM_ARRAY_TASK_ID} x node count + {env.SLURM_PROCID}", task * nnodes + procid
        )
    array_job = _text(e, env.SLURM_ARRAY_JOB_ID, strict)
    explicit = _text(e, env.NVRX_OTEL_JOB_ID, strict)
    if explicit is not None:
        job_id: str | None = explicit
    elif array_job is not None and task is not None:
        job_id = f"{array_job}_{task}"
    else:
        job_id = _text(e, env.SLURM_JOB_ID, strict) or _text(e, env.TORCHELASTIC_RUN_ID, strict)
    ident = Identity(
        workload_rank=_first_int(
            e,
            (env.RANK, env.OMPI_COMM_WORLD_RANK, env.PMIX_RANK, env.PMI_RANK, env.PMI_ID),
            strict,
        ),
        workload_local_rank=_first_int(
            e, (env.LOCAL_RANK, env.OMPI_COMM_WORLD_LOCAL_RANK, env.MPI_LOCALRANKID), strict
        ),
        world_size=_first_int(e, (env.WORLD_SIZE, env.OMPI_COMM_WORLD_SIZE, env.PMI_SIZE), strict),
        local_world_size=_first_int(
            e,
            (env.LOCAL_WORLD_SIZE, env.OMPI_COMM_WORLD_LOCAL_SIZE, env.MPI_LOCALNRANKS),
            strict,
        ),
        group_rank=_int(e, env.GROUP_RANK, strict),
        infra_rank=infra_rank,
        infra_local_rank=_int(e, env.SLURM_LOCALID, strict),
        node_id=_text(e, env.NVRX_OTEL_NODE_ID, strict) or host,
        job_id=job_id,
        array_task_id=task,
        restart_cycle=_int(e, env.TORCHELASTIC_RESTART_COUNT, strict),
        host_name=host,
        pid=os.getpid() if pid is None else pid,
        run_tags=env.RUN_TAGS.get(e, strict=strict, consequence="no run tags") or (),
    )
    unknown = set(overrides) - _OVERRIDABLE
    if unknown:
        raise TypeError(f"set_identity() got unknown fields: {', '.join(sorted(unknown))}")
    if not overrides:
        return ident
    checked: dict[str, Any] = {
        k: _in_range(f"set_identity({k}=...)", v) if isinstance(v, int) else v
        for k, v in overrides.items()
    }
    return replace(ident, **checked)


def _in_range(what: str, value: int) -> int | None:
    """``value`` when records can carry it (a signed 64-bit integer), else unknown: a
    rank no record could hold is reported once, never raised into training."""
    if -INT64_MAX - 1 <= value <= INT64_MAX:
        return value
    warn_once(f"{what} = {value} does not fit in 64 bits; {_CONSEQUENCE}")
    return None


# --- the per-process value -----------------------------------------------------------------

_lock = threading.Lock()
_cached: Identity | None = None
_overrides: dict[str, Any] = {}


def get_identity() -> Identity:
    """This process's identity, resolved once (and again in a forked child)."""
    ident = _cached
    if ident is not None and ident.pid == os.getpid():
        return ident
    return _refresh()


def _refresh() -> Identity:
    global _cached
    with _lock:
        _cached = resolve(**_overrides)
        return _cached


def set_identity(**fields_: Any) -> Identity:
    """Override identity fields for this process and its forked children.

    For jobs that pass ranks as arguments (``mp.spawn``): call
    ``set_identity(workload_rank=rank, world_size=n, workload_local_rank=rank)`` first
    thing in the worker. Overrides win over the environment; ``None`` clears a field to
    unknown. Raises ``TypeError`` for a field that does not exist.
    """
    resolve(environ={}, host_name="", pid=0, **fields_)  # validates the field names
    with _lock:
        _overrides.update(fields_)
    return _refresh()


def clear_identity() -> None:
    """Drop every override and the cached value (tests, notebooks)."""
    global _cached
    with _lock:
        _overrides.clear()
        _cached = None


def _after_fork_in_child() -> None:
    global _lock, _cached, _instance_id
    _lock = threading.Lock()
    _cached = None
    _instance_id = str(uuid.uuid4())


os.register_at_fork(after_in_child=_after_fork_in_child)
