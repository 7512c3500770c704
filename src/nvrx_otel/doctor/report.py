"""``nvrx-otel doctor``: what this process would be, do and reach, and what would lose records.

Four parts: the identity (launcher, ranks, node, job), the resolved configuration with
each setting's source (:func:`~nvrx_otel.activeconfig.get_active_config`), the spool
directory's state (:mod:`.spoolstate`) and the OTLP endpoints' answers (:mod:`.endpoint`).
Findings are *problems* when records would be lost or never reach their destination (an
unusable spool, writers no aggregator serves, a writer at its budget, a spool file the
aggregator will not read, a variable the aggregator refuses to start with, a malformed
headers variable, an endpoint that does not answer); the exit status is then 1.
*Warnings* (a malformed variable a rank would replace by its default, another job's
unserved spool files, little free space) leave it 0. The aggregator's own checks are asked
(:meth:`~nvrx_otel.aggregator.config.AggregatorConfig.otlp_endpoints`,
:class:`~nvrx_otel.aggregator.spooldir.SpoolDir`), never copied, and no secret is shown:
header values never, URLs with their user, password and query values masked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nvrx_otel import env
from nvrx_otel.activeconfig import ActiveConfig, get_active_config
from nvrx_otel.aggregator.health import human_bytes, plural
from nvrx_otel.doctor.endpoint import Probe, probe
from nvrx_otel.doctor.spoolstate import SpoolState, inspect
from nvrx_otel.envparse import warnings_collected
from nvrx_otel.identity import Identity, get_identity, resolve
from nvrx_otel.spool.paths import NO_JOB, job_dir

if TYPE_CHECKING:
    from nvrx_otel.aggregator.otlp_transport import OtlpConfig

BUDGET_WARN: Final = 0.5
"""A writer whose files take this share of its budget is warned about (it wakes the
aggregator from there on); at the whole budget it drops records."""

_LAUNCHERS: Final = (
    (env.SLURM_PROCID, "Slurm"),
    (env.OMPI_COMM_WORLD_RANK, "Open MPI"),
    (env.PMI_RANK, "MPICH (Hydra)"),
    (env.PMI_ID, "MPICH (Hydra, -pmi-port)"),
    (env.PMIX_RANK, "PMIx"),
    (env.TORCHELASTIC_RUN_ID, "torchrun"),
    (env.GROUP_RANK, "torchrun"),
    (env.RANK, "unknown launcher"),
)


@dataclass
class Report:
    """Everything the doctor found."""

    identity: dict[str, str]
    config: ActiveConfig
    spool: SpoolState
    probes: list[Probe]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        return 1 if self.problems else 0


def launcher(e: Mapping[str, str]) -> str:
    """Which launcher started this process, by the variables it exports."""
    for var, name in _LAUNCHERS:
        if e.get(var, "").strip():
            return f"{name} ({var})"
    return "none"


def _identity(ident: Identity, e: Mapping[str, str], job: str | None) -> dict[str, str]:
    def rank(value: int | None, size: int | None = None) -> str:
        text = "?" if value is None else str(value)
        return f"{text}/{size}" if size is not None else text

    node_src = env.NVRX_OTEL_NODE_ID if e.get(env.NVRX_OTEL_NODE_ID, "").strip() else "host name"
    if job:
        job_text = f"{job} (--job-id)"
    elif ident.job_id:
        var = next(
            (
                v
                for v in (
                    env.NVRX_OTEL_JOB_ID,
                    env.SLURM_ARRAY_JOB_ID,
                    env.SLURM_JOB_ID,
                    env.TORCHELASTIC_RUN_ID,
                )
                if e.get(v, "").strip()
            ),
            "?",
        )
        job_text = f"{ident.job_id} ({var})"
    else:
        job_text = f"none (spool directory {NO_JOB})"
    return {
        "launcher": launcher(e),
        "workload rank": rank(ident.workload_rank, ident.world_size),
        "workload local rank": rank(ident.workload_local_rank, ident.local_world_size),
        "infra rank": rank(ident.infra_rank),
        "infra local rank": rank(ident.infra_local_rank),
        "node": f"{ident.node_id} ({node_src})",
        "job": job_text,
        "restart cycle": rank(ident.restart_cycle),
        "run tags": ", ".join(f"{k}={v}" for k, v in ident.run_tags) or "none",
    }


def _endpoints(
    config: ActiveConfig, e: Mapping[str, str], base: str | None
) -> tuple[list[tuple[str, OtlpConfig]], str]:
    """The OTLP configs in use: the aggregator's (logs, traces) when it exports, and the
    traces one when spans take the SDK path with the ``otlp`` exporter; and why the
    aggregator would refuse to start ("" when it would start): its own checks, asked."""
    from nvrx_otel.aggregator.config import AggregatorConfig
    from nvrx_otel.aggregator.otlp_transport import resolve

    out: list[tuple[str, OtlpConfig]] = []
    refused = ""
    try:
        aggregator = AggregatorConfig.from_env(
            strict=True, environ=e, log_dir=Path(), spool_root=Path(), otlp_endpoint=base
        )
        out += aggregator.otlp_endpoints(e).items()
    except ValueError as exc:
        refused = str(exc)
    spans = config.get("tracing", "spans go to")
    exporters = config.get("tracing", "exporters")
    sdk_otlp = exporters is not None and "otlp" in str(exporters.value).split(",")
    if spans is not None and spans.value == "sdk" and sdk_otlp and "traces" not in dict(out):
        try:
            out.append(("traces", resolve("traces", base_endpoint=base, environ=e)))
        except ValueError:
            pass  # reported with the configuration
    seen = set()
    unique = []
    for signal, cfg in out:
        if cfg.endpoint not in seen:
            seen.add(cfg.endpoint)
            unique.append((signal, cfg))
    return unique, refused


def gather(
    environ: Mapping[str, str] | None = None,
    *,
    spool_dir: str | None = None,
    job_id: str | None = None,
    otlp_endpoint: str | None = None,
    timeout: float = 3.0,
    cwd: Path | None = None,
) -> Report:
    """Look at everything (nothing is changed) and judge it."""
    e: Mapping[str, str] = os.environ if environ is None else environ
    with warnings_collected() as said:  # e.g. RANK=abc: in the report, not only on stderr
        ident = get_identity() if environ is None else resolve(e)
        config = get_active_config(
            environ, cwd=cwd, otlp_endpoint=otlp_endpoint, spool_dir=spool_dir
        )
        root_setting = config.get("spool", "root")
        root = root_setting.value if root_setting is not None else None
        disabled = bool(env.DISABLED.get(e))
        directory = job_dir(root, job_id or ident.job_id) if root else None
        spool = inspect(root, directory)
        endpoints, refused = _endpoints(config, e, otlp_endpoint)
    probes = [probe(signal, cfg, timeout) for signal, cfg in endpoints]
    report = Report(_identity(ident, e, job_id), config, spool, probes)
    if refused:
        report.problems.append(
            f"the aggregator would refuse to start (`nvrx-otel aggregate` exits 2): {refused}; "
            "nothing would reach the node log or OTLP"
        )
    headers = [c.header_problem for _, c in endpoints if c.header_problem]
    report.problems += [f"{p}: records would be sent without them" for p in dict.fromkeys(headers)]
    promoted = [refused, *headers]
    report.warnings += [
        w
        for w in dict.fromkeys([*config.problems, *said])
        if not any(p and w.startswith(p) for p in promoted)
    ]
    if disabled:
        report.warnings.append(
            "NVRX_OTEL_DISABLED is set: nothing is spooled, traced or exported; setup_logger "
            "logs to stderr"
        )
    _judge_spool(report, disabled)
    report.problems += [p.line() for p in probes if not p.ok]
    return report


def _judge_spool(report: Report, disabled: bool) -> None:
    st = report.spool
    if st.root is None:
        report.warnings.append(
            "no spool (NVRX_NODE_LOCAL_TMPDIR unset): records go to stderr, there is no node log"
        )
        return
    if st.unusable and not disabled:
        report.problems.append(
            f"{st.unusable}: the front ends log to stderr instead, nothing reaches the node log"
        )
    for name, why in st.refused.items():
        report.problems.append(
            f"spool file {Path(st.job_dir or '') / name} is not read by the aggregator ({why}): "
            "its records would never be delivered"
        )
    if st.state_problem:
        report.warnings.append(f"aggregator state: {st.state_problem}")
    if st.writers and st.aggregator_pid is None and (st.backlog or st.live_writers):
        report.problems.append(
            f"{plural(len(st.writers), 'writer')} ({st.live_writers} live) "
            f"{'holds' if len(st.writers) == 1 else 'hold'} "
            f"{human_bytes(st.backlog)} not in the node log and no aggregator serves "
            f"{st.job_dir}: start `nvrx-otel aggregate`, or writers drop records at their budget"
        )
    for w in st.writers:
        who = f"writer {w.writer} ({w.proc}, pid {w.pid})"
        share = f"{human_bytes(w.held)} of its {human_bytes(w.budget)} budget"
        if w.at_budget:
            report.problems.append(
                f"{who} holds {share}, no room for another {human_bytes(w.max_file)} file: "
                "it drops new records once its current file is full"
            )
        elif w.budget_share >= BUDGET_WARN:
            report.warnings.append(f"{who} holds {share}: the aggregator is falling behind")
    for job in st.other_jobs:
        if not job.served:
            report.warnings.append(
                f"{job.path} holds {plural(job.files, 'spool file')} ({human_bytes(job.size)}) "
                "of another job and no aggregator serves it (a job id that differs between "
                "ranks and aggregator?)"
            )
    budget = report.config.get("spool", "budget bytes")
    if st.free_bytes is not None and budget is not None and st.free_bytes < int(budget.value):
        report.warnings.append(
            f"the spool's file system has {human_bytes(st.free_bytes)} free, less than one "
            f"process's budget ({human_bytes(int(budget.value))}): writers drop on a full disk"
        )
