"""``get_active_config()``: every resolved setting with where its value came from.

Sources, as the resolvers rank them: an argument of this process's ``setup_logger``,
``setup_tracing`` or ``configure_logging`` call (or of the ``nvrx-otel`` command),
the parent process's settings (the loguru front end's children), an environment
variable, a configuration file (the loguru front end's ``logflow.yaml``, ``[tool.logflow]``
...), a value worked out from others, or the default. The resolvers themselves are the
front ends' (``env``, ``logflow.settings``, the aggregator's ``otlp_transport``): this
module only asks them and says which layer answered, so what it reports is what the front
ends do. Nothing here raises: a malformed value is reported in ``problem`` and its
default shown, as the front ends use it.

``nvrx-otel doctor`` prints it; ``get_active_config().as_dict()`` is JSON-ready.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvrx_otel import env
from nvrx_otel.envparse import Setting

DEFAULT: Final = "default"
_HIDDEN: Final = frozenset(
    {env.NVRX_OTEL_COLLECTOR_BIN, env.NVRX_OTEL_COLLECTOR_CACHE, env.NVRX_OTEL_LOGFLOW_PARENT}
)
"""Rows that configure no front end (the tests' collector) or are shown resolved."""
_SHOWN: Final = frozenset(
    {
        env.NVRX_NODE_LOCAL_TMPDIR,
        env.NVRX_LOG_DEBUG,
        env.NVRX_LOG_TO_STDOUT,
        env.NVRX_LOG_MAX_FILE_SIZE_KB,
        env.NVRX_LOG_MAX_LOG_FILES,
        env.NVRX_OTEL_NODE_ID,
        env.NVRX_OTEL_DISABLED,
        env.NVRX_OTEL_SPOOL_SPANS,
        env.NVRX_OTEL_SPOOL_BUDGET_MB,
        env.NVRX_OTEL_SPOOL_SCALE,
        env.NVRX_OTEL_MAX_RECORD_KB,
        env.NVRX_OTEL_LOGURU_DIAGNOSE,
        env.OTEL_TRACES_EXPORTER,
        env.OTEL_TRACES_SAMPLER,
        env.TRACEPARENT,
    }
)
"""Rows shown resolved in their own section, not again under ``other``."""
_OTLP_PREFIX: Final = "OTEL_EXPORTER_OTLP_"
_SIGNALS: Final = ("logs", "traces")


@dataclass(frozen=True)
class ActiveSetting:
    """One resolved setting: ``section`` (``logging``, ``spool``, ``tracing``, ``otlp``,
    ``logflow``, ``other``), its ``name``, ``value``, ``source`` and, when a given
    value was malformed and the default is used instead, ``problem``."""

    section: str
    name: str
    value: Any
    source: str
    problem: str = ""


@dataclass(frozen=True)
class ActiveConfig:
    """The resolved settings, in sections."""

    settings: tuple[ActiveSetting, ...]

    def __iter__(self) -> Iterator[ActiveSetting]:
        return iter(self.settings)

    def get(self, section: str, name: str) -> ActiveSetting | None:
        """The setting ``name`` of ``section``, None when there is none."""
        return next((s for s in self.settings if (s.section, s.name) == (section, name)), None)

    @property
    def problems(self) -> list[str]:
        """What was malformed, one line each."""
        return list(dict.fromkeys(s.problem for s in self.settings if s.problem))

    def as_dict(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{section: {name: {"value", "source"[, "problem"]}}}`` (JSON-ready)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for s in self.settings:
            item: dict[str, Any] = {"value": _plain(s.value), "source": s.source}
            if s.problem:
                item["problem"] = s.problem
            out.setdefault(s.section, {})[s.name] = item
        return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def from_env(setting: Setting[Any, Any], environ: Mapping[str, str]) -> tuple[Any, str, str]:
    """``(value, source, problem)`` of one settings row, as :meth:`Setting.get` resolves it."""
    raw = environ.get(setting.name)
    if raw is None or raw.strip() == "":
        return setting.default, DEFAULT, ""
    try:
        return setting.parse(setting.name, raw), f"environment variable {setting.name}", ""
    except ValueError as exc:
        return setting.default, DEFAULT, f"{exc}; using the default"


def get_active_config(
    environ: Mapping[str, str] | None = None,
    *,
    cwd: Path | None = None,
    otlp_endpoint: str | None = None,
    spool_dir: str | None = None,
) -> ActiveConfig:
    """The settings this process resolves now, each with its source.

    ``environ`` (default ``os.environ``) and ``cwd`` (for the loguru front end's files) let
    a caller ask about another environment; ``otlp_endpoint`` and ``spool_dir`` are the
    ``nvrx-otel`` command's arguments (the aggregator's ``--otlp-endpoint`` and
    ``--spool-dir``), which win as they do there. Arguments of this process's own
    ``setup_logger``/``setup_tracing``/``configure_logging`` calls are reported only when
    ``environ`` is the process's own.
    """
    own = environ is None
    e: Mapping[str, str] = os.environ if environ is None else environ
    out: list[ActiveSetting] = []
    out += _logging(e, own, spool_dir)
    out += _tracing(e, own, spool_dir)
    out += _otlp(e, otlp_endpoint)
    out += _logflow(e, own, cwd)
    out += _other(e)
    return ActiveConfig(tuple(out))


def _arguments(module: str, own: bool) -> dict[str, str]:
    """The arguments of the front end in ``module``, if it is imported and ``own``."""
    found = sys.modules.get(module) if own else None
    return dict(found.active_arguments()) if found is not None else {}


def _spool_root(
    e: Mapping[str, str], args: Mapping[str, str], arg_name: str, caller: str, given: str | None
) -> ActiveSetting:
    if given:
        return ActiveSetting("spool", "root", given, "argument --spool-dir")
    if args.get(arg_name):
        return ActiveSetting("spool", "root", args[arg_name], f"argument {arg_name} of {caller}")
    value, source, problem = from_env(env.SPOOL_ROOT, e)
    return ActiveSetting("spool", "root", value, source, problem)


def _logging(e: Mapping[str, str], own: bool, spool_dir: str | None) -> list[ActiveSetting]:
    args = _arguments("nvrx_otel.logging.setup", own)
    caller = "setup_logger()"
    root_setting = _spool_root(e, args, "node_local_tmp_dir", caller, spool_dir)
    disabled, d_source, d_problem = from_env(env.DISABLED, e)
    out = [ActiveSetting("logging", "disabled", disabled, d_source, d_problem)]
    debug, source, problem = from_env(env.LOG_DEBUG, e)
    out.append(ActiveSetting("logging", "level", "DEBUG" if debug else "INFO", source, problem))
    to_stdout, source, problem = from_env(env.LOG_TO_STDOUT, e)
    stream = "stdout" if to_stdout else "stderr"
    out.append(ActiveSetting("logging", "stream (without a spool)", stream, source, problem))
    if "log_file" in args:
        out.append(ActiveSetting("logging", "log_file", args["log_file"], f"argument of {caller}"))
    root = root_setting.value
    if "log_file" in args:
        where = "log_file"
    elif disabled:
        where = f"{stream} (NVRX_OTEL_DISABLED: no spool)"
    else:
        where = "spool" if root else stream
    out.append(ActiveSetting("logging", "records go to", where, "worked out from the above"))
    return [*out, root_setting, *_spool(e, own, root)]


def _spool(e: Mapping[str, str], own: bool, root: str | None) -> list[ActiveSetting]:
    from nvrx_otel.identity import get_identity
    from nvrx_otel.identity import resolve as resolve_identity
    from nvrx_otel.spool.paths import job_dir

    out: list[ActiveSetting] = []
    ident = get_identity() if own else resolve_identity(e, strict=False)  # set_identity wins
    if root:
        where = "spool root and job id (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, ...)"
        out.append(ActiveSetting("spool", "job directory", str(job_dir(root, ident.job_id)), where))
    for name, row in (
        ("file size KB", env.SPOOL_FILE_SIZE_KB),
        ("files per process", env.SPOOL_FILES),
        ("budget scale", env.SPOOL_SCALE),
        ("max record KB", env.MAX_RECORD_KB),
    ):
        value, source, problem = from_env(row, e)
        out.append(ActiveSetting("spool", name, value, source, problem))
    mb, source, problem = from_env(env.SPOOL_BUDGET_MB, e)
    if not mb:
        source = "NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB x NVRX_OTEL_SPOOL_SCALE"
    out.append(ActiveSetting("spool", "budget bytes", env.spool_budget(e), source, problem))
    node, source, problem = from_env(env.NODE_ID, e)
    if node is None:
        node, source = ident.node_id, "the host name"
    out.append(ActiveSetting("spool", "node id", node, source, problem))
    return out


def _tracing(e: Mapping[str, str], own: bool, spool_dir: str | None) -> list[ActiveSetting]:
    from nvrx_otel.tracing.sampling import sampler_from_env
    from nvrx_otel.tracing.sdk import exporter_names

    args = _arguments("nvrx_otel.tracing.setup", own)
    root = _spool_root(e, args, "spool_dir", "setup_tracing()", spool_dir)
    out = [ActiveSetting("tracing", "spool root", root.value, root.source, root.problem)]
    disabled = from_env(env.DISABLED, e)[0]
    sdk_off = env.read(env.OTEL_SDK_DISABLED, env.parse_flag, False, environ=e)
    spool_spans, s_source, s_problem = from_env(env.SPOOL_SPANS, e)
    names = exporter_names(e)
    n_source = (
        f"environment variable {env.OTEL_TRACES_EXPORTER}"
        if e.get(env.OTEL_TRACES_EXPORTER, "").strip()
        else DEFAULT
    )
    if "exporters" in args:
        names, n_source = ["(given)"], "argument exporters of setup_tracing()"
    if disabled or sdk_off:
        why = env.NVRX_OTEL_DISABLED if disabled else env.OTEL_SDK_DISABLED
        mode, m_source = "off", f"environment variable {why}"
    elif root.value and (spool_spans or "spool_dir" in args):
        mode, m_source = "spool", f"spool root ({root.source})"
    else:
        mode, m_source = "sdk", "no spool" if not root.value else f"{s_source} (spool spans off)"
    out.append(ActiveSetting("tracing", "spans go to", mode, m_source))
    out.append(ActiveSetting("tracing", "spool spans", spool_spans, s_source, s_problem))
    out.append(ActiveSetting("tracing", "exporters", ",".join(names), n_source))
    sampler = sampler_from_env(e)
    s_src = (
        f"environment variable {env.OTEL_TRACES_SAMPLER}"
        if e.get(env.OTEL_TRACES_SAMPLER, "").strip()
        else DEFAULT
    )
    out.append(ActiveSetting("tracing", "sampler", f"{sampler.name} {sampler.ratio}", s_src))
    parent = e.get(env.TRACEPARENT, "").strip()
    if parent:
        out.append(ActiveSetting("tracing", "parent", parent, "environment variable TRACEPARENT"))
    return out


def _otlp_source(e: Mapping[str, str], name: str, signal: str) -> str:
    specific = name.replace(_OTLP_PREFIX, f"{_OTLP_PREFIX}{signal.upper()}_")
    for candidate in (specific, name):
        if e.get(candidate, "").strip():
            return f"environment variable {candidate}"
    return DEFAULT


def _otlp(e: Mapping[str, str], endpoint: str | None) -> list[ActiveSetting]:
    from nvrx_otel.aggregator.config import otlp_enabled
    from nvrx_otel.aggregator.otlp_transport import resolve

    on = otlp_enabled(e, endpoint)
    if endpoint:
        why = "argument --otlp-endpoint"
    else:
        why = "an OTLP endpoint variable is set" if on else "no OTLP endpoint variable is set"
    out = [ActiveSetting("otlp", "aggregator exports", on, why)]
    for signal in _SIGNALS:
        try:
            cfg = resolve(signal, base_endpoint=endpoint, environ=e)
        except ValueError as exc:
            out.append(ActiveSetting("otlp", f"{signal} endpoint", None, DEFAULT, str(exc)))
            continue

        def row(
            name: str, value: Any, var: str, sig: str = signal, problem: str = ""
        ) -> ActiveSetting:
            source = _otlp_source(e, var, sig)
            return ActiveSetting("otlp", f"{sig} {name}", value, source, problem)

        # credentials in the URL (user:password@, query values) are masked
        ep = row("endpoint", cfg.shown_endpoint, env.OTEL_EXPORTER_OTLP_ENDPOINT)
        if endpoint:
            ep = ActiveSetting("otlp", ep.name, cfg.shown_endpoint, "argument --otlp-endpoint")
        out += [
            ep,
            row("protocol", cfg.protocol, env.OTEL_EXPORTER_OTLP_PROTOCOL),
            row("compression", cfg.compression, env.OTEL_EXPORTER_OTLP_COMPRESSION),
            row("timeout s", cfg.timeout, env.OTEL_EXPORTER_OTLP_TIMEOUT),
            # header values may be credentials: their names only
            row(
                "headers",
                sorted(cfg.headers),
                env.OTEL_EXPORTER_OTLP_HEADERS,
                problem=cfg.header_problem,
            ),
            row("certificate", cfg.certificate, env.OTEL_EXPORTER_OTLP_CERTIFICATE),
            row(
                "client certificate",
                cfg.client_certificate,
                env.OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
            ),
            row("client key", cfg.client_key, env.OTEL_EXPORTER_OTLP_CLIENT_KEY),
        ]
    return out


def _logflow(e: Mapping[str, str], own: bool, cwd: Path | None) -> list[ActiveSetting]:
    from nvrx_otel.logging.logflow.settings import resolve

    configure = sys.modules.get("nvrx_otel.logging.logflow.configure") if own else None
    settings = configure.active_settings() if configure is not None else None
    if settings is None:
        try:
            settings = resolve({}, cwd=cwd, environ=e, strict_env=True)
        except ValueError as exc:
            return [ActiveSetting("logflow", "settings", None, DEFAULT, str(exc))]
    out = []
    for key, source in settings.sources.items():
        value = getattr(settings, key)
        if key == "module_levels":
            value = {r.prefix: r.as_config() for r in value}
        out.append(ActiveSetting("logflow", key, value, source))
    return out


def _other(e: Mapping[str, str]) -> list[ActiveSetting]:
    """Every other nvrx-otel and OpenTelemetry row of the settings table."""
    out = []
    for name, row in env.SETTINGS.items():
        if name in _HIDDEN or name in _SHOWN or name.startswith(_OTLP_PREFIX):
            continue
        if not name.startswith(("NVRX_", "OTEL_")):
            continue
        value, source, problem = from_env(row, e)
        if row.parse is env.parse_tags and value is not None:
            value = dict(value)  # key=value pairs, in order
        out.append(ActiveSetting("other", name, value, source, problem))
    return out
