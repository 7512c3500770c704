"""LogFlow's settings: one table and one resolver.

Each setting is declared once (:data:`TABLE`): its argument name, which is also its key in
configuration files, its environment variables, its default and its check. The resolver
takes each setting from the highest layer that sets it:

1. arguments of ``configure_logging`` (``None`` means not given);
2. in a child process, the settings its parent resolved (so children write where their
   parent does; see :func:`export_for_children`);
3. environment variables (LogFlow's ``LOGFLOW_*`` names; unset or empty means not given);
4. ``logflow.yaml``, then ``logflow.yml``, then ``[tool.logflow]`` in ``pyproject.toml``,
   all in the working directory;
5. ``$XDG_CONFIG_HOME/logflow/config.yaml`` (default ``~/.config/logflow/config.yaml``);
6. the defaults.

Every valid value is honoured, falsy ones included (``rotation_on_startup: false``,
``retention: 0``); a key set to ``null`` counts as not set. Every value present in any
layer is checked, and an unknown key or an invalid value raises ``ValueError`` naming the
key, the value and where it came from. Unlike LogFlow, which reads only the first file it
finds, layers combine per setting; ``module_levels`` is taken whole from one layer.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from nvrx_otel import env
from nvrx_otel.logging.logflow.levels import Invalid, Level, Rule, check_level, check_module_levels

_TRUE: Final = frozenset({"true", "1", "t", "y", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "f", "n", "no", "off"})
ARGUMENT: Final = "configure_logging() argument"


def _check_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise Invalid("true/1/t/y/yes or false/0/f/n/no")


def _check_count(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise Invalid("a whole number >= 0")


def _check_dir(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and value.strip() and "\0" not in value:
        return value
    raise Invalid("a directory path")


def _check_name(value: Any) -> str:
    if isinstance(value, str):
        text = value.strip()
        if (
            text
            and text not in (".", "..")
            and "/" not in text
            and os.sep not in text
            and not any(ord(c) < 32 for c in text)
        ):
            return text
    raise Invalid("a file name stem without path separators")


_TIME_UNITS: Final = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
}  # fmt: skip
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:([kmgtpe]?)(i?)b)?\s*", re.IGNORECASE)
_DURATION_PART: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*,?", re.IGNORECASE)


def _check_size(value: Any) -> int:
    """A byte count, or loguru's spelling: ``100 MB`` (decimal, 10**8 bytes), ``100 MiB``
    (binary, 100 * 2**20), ``512 KB``, ``2 GB``; ``B`` and ``b`` both mean bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        if m:
            base = 1024 if m[3] else 1000
            size = int(float(m[1]) * base ** ("kmgtpe".index(m[2].lower()) + 1 if m[2] else 1))
            if not m[2]:
                size = int(float(m[1]))
            if size > 0:
                return size
    raise Invalid("a size such as 100 MB, 100 MiB, 512 KB or a number of bytes (> 0)")


def _check_interval(value: Any) -> float:
    """Seconds, or ``30 s``, ``15 min``, ``6 h``, ``1 d``, ``1 week``, ``1 h 30 min``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and 0 < value < float("inf"):
        return float(value)
    if isinstance(value, str) and value.strip():
        seconds, pos, text = 0.0, 0, value.strip()
        while pos < len(text):
            m = _DURATION_PART.match(text, pos)
            if m is None or m.end() == pos:
                break
            unit = m[2].lower()
            if unit not in _TIME_UNITS and unit:
                break
            if not unit and (pos > 0 or m.end() < len(text)):
                break  # a bare number only alone
            seconds += float(m[1]) * _TIME_UNITS.get(unit, 1.0)
            pos = m.end()
        else:
            if seconds > 0:
                return seconds
    raise Invalid("a duration such as 30 s, 15 min, 6 h, 1 d, 1 week or 1 h 30 min (> 0)")


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in options:
            return value.strip().lower()
        raise Invalid(" or ".join(options))

    return check


def _check_signal(value: Any) -> str:
    """A signal name this platform has (``SIGHUP``, ``HUP``, ``SIGRTMIN+3``), not one that
    cannot be caught or that the job's launchers use for themselves."""
    import signal

    if isinstance(value, str):
        text = value.strip().upper()
        name = text if text.startswith("SIG") else "SIG" + text
        m = re.fullmatch(r"SIGRTMIN\+(\d+)", name)
        known = (m is not None and signal.SIGRTMIN + int(m[1]) <= signal.SIGRTMAX) or isinstance(
            getattr(signal, name, None), signal.Signals
        )
        if known and name not in _RESERVED_SIGNALS:
            return name
    raise Invalid(
        "a signal name such as SIGRTMIN+3 or SIGHUP (not "
        + ", ".join(sorted(_RESERVED_SIGNALS))
        + ")"
    )


_RESERVED_SIGNALS: Final = frozenset(
    {"SIGKILL", "SIGSTOP", "SIGTERM", "SIGINT", "SIGUSR1", "SIGCHLD", "SIGSEGV", "SIGBUS",
     "SIGFPE", "SIGILL", "SIGABRT", "SIGPIPE"}
)  # fmt: skip
"""Signals the reload cannot take: uncatchable, the ones that end or requeue a job (Slurm's
and Lightning's requeue is SIGUSR1), and the ones that report a crash."""


_OUR_ENV: Final = "environment variable NVRX_OTEL_LOGURU_"


@dataclass(frozen=True)
class Setting:
    """One setting: ``key`` (argument name and file key), env vars, default, check."""

    key: str
    envs: tuple[str, ...]
    default: Any
    check: Callable[[Any], Any]
    in_files: bool = True


TABLE: Final[tuple[Setting, ...]] = (
    Setting("log_dir", (env.LOGFLOW_DIR,), "./logs", _check_dir),
    Setting("script_name", (env.LOGFLOW_SCRIPT_NAME,), None, _check_name),
    Setting("file_level", (env.LOGFLOW_FILE_LEVEL,), "DEBUG", check_level),
    Setting("console_level", (env.LOGFLOW_CONSOLE_LEVEL,), "INFO", check_level),
    Setting(
        "rotation_on_startup",
        (env.LOGFLOW_ROTATION_ON_STARTUP, env.LOGFLOW_STARTUP_ROTATION),
        True,
        _check_bool,
    ),
    Setting("retention", (env.LOGFLOW_RETENTION,), 5, _check_count),
    Setting("enqueue", (env.LOGFLOW_ENQUEUE,), False, _check_bool),
    Setting("eager_enqueue", (env.LOGFLOW_EAGER_ENQUEUE,), False, _check_bool, in_files=False),
    Setting("diagnose", (env.NVRX_OTEL_LOGURU_DIAGNOSE,), False, _check_bool),
    Setting("module_levels", (), (), check_module_levels),
    Setting("file_per", (env.NVRX_OTEL_LOGURU_FILE_PER,), "rank", _choice("rank", "worker")),
    Setting("file_format", (env.NVRX_OTEL_LOGURU_FILE_FORMAT,), "text", _choice("text", "json")),
    Setting("rotation_size", (env.NVRX_OTEL_LOGURU_ROTATION_SIZE,), None, _check_size),
    Setting("rotation_interval", (env.NVRX_OTEL_LOGURU_ROTATION_INTERVAL,), None, _check_interval),
    Setting("compression", (env.NVRX_OTEL_LOGURU_COMPRESSION,), "none", _choice("gz", "none")),
    Setting("reload_signal", (env.NVRX_OTEL_LOGURU_RELOAD_SIGNAL,), None, _check_signal),
    Setting(
        "reload_action", (env.NVRX_OTEL_LOGURU_RELOAD_ACTION,), "debug", _choice("debug", "reload")
    ),
)
"""Every setting of the loguru front end, in one place."""

_BY_KEY: Final = {s.key: s for s in TABLE}
FILE_KEYS: Final = frozenset(s.key for s in TABLE if s.in_files)


@dataclass(frozen=True)
class Settings:
    """The resolved settings; ``sources`` says where each value came from."""

    log_dir: str
    script_name: str | None
    file_level: Level
    console_level: Level
    rotation_on_startup: bool
    retention: int
    enqueue: bool
    eager_enqueue: bool
    diagnose: bool
    module_levels: tuple[Rule, ...]
    file_per: str = "rank"
    file_format: str = "text"
    rotation_size: int | None = None
    rotation_interval: float | None = None
    compression: str = "none"
    reload_signal: str | None = None
    reload_action: str = "debug"
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    inherited: bool = field(default=False, compare=False)


@dataclass
class Layer:
    """Values from one source; ``where`` names it in error messages."""

    where: str
    values: dict[str, Any]
    per_key_where: dict[str, str] = field(default_factory=dict)

    def source(self, key: str) -> str:
        return self.per_key_where.get(key, self.where)


# --- reading the sources -----------------------------------------------------------------


def _fail(key: str, value: Any, where: str, expected: str) -> ValueError:
    return ValueError(f"logflow setting {key}={value!r} in {where}: expected {expected}")


def _read_yaml(path: Path) -> dict[str, Any] | None:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        env.warn_once(f"cannot read {path}: {exc}; skipping it")
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _read_pyproject(path: Path) -> dict[str, Any] | None:
    tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        env.warn_once(f"cannot read {path}: {exc}; skipping it")
        return None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        # Not our file: a broken pyproject.toml must not stop the job's logging.
        env.warn_once(f"cannot parse {path}: {exc}; skipping its [tool.logflow]")
        return None
    table = data.get("tool", {}).get("logflow")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [tool.logflow] must be a table")
    return table


def config_files(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The configuration files in precedence order (highest first), present or not."""
    here = Path.cwd() if cwd is None else cwd
    e = os.environ if environ is None else environ
    xdg = e.get(env.XDG_CONFIG_HOME) or ""
    base = Path(xdg) if xdg.strip() else Path("~/.config").expanduser()
    return [
        here / "logflow.yaml",
        here / "logflow.yml",
        here / "pyproject.toml",
        base / "logflow" / "config.yaml",
    ]


def file_layers(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> list[Layer]:
    """One layer per configuration file that exists, highest first."""
    layers = []
    for path in config_files(cwd, environ):
        if path.name == "pyproject.toml":
            values = _read_pyproject(path)
            where = f"{path} [tool.logflow]"
        else:
            values = _read_yaml(path)
            where = str(path)
        if values is None:
            continue
        for key, value in values.items():
            if key not in FILE_KEYS:
                raise ValueError(
                    f"unknown logflow setting {key!r} (value {value!r}) in {where}; "
                    f"known settings: {', '.join(sorted(FILE_KEYS))}"
                )
        layers.append(Layer(where, {k: v for k, v in values.items() if v is not None}))
    return layers


def env_layer(environ: Mapping[str, str] | None = None) -> Layer:
    """The ``LOGFLOW_*`` (and nvrx-otel) variables that are set and not empty."""
    e = os.environ if environ is None else environ
    layer = Layer("the environment", {})
    for setting in TABLE:
        found = [(name, e[name]) for name in setting.envs if e.get(name, "").strip()]
        if not found:
            continue
        name, raw = found[0]
        if len(found) > 1:
            checked = {n: _checked(setting, v, f"environment variable {n}") for n, v in found}
            if len(set(map(repr, checked.values()))) > 1:
                pairs = ", ".join(f"{n}={v!r}" for n, v in found)
                raise ValueError(f"logflow setting {setting.key}: conflicting values {pairs}")
        layer.values[setting.key] = raw
        layer.per_key_where[setting.key] = f"environment variable {name}"
    return layer


def parent_layer(environ: Mapping[str, str] | None = None) -> Layer | None:
    """The settings a parent process exported, in one of its children (else None)."""
    e = os.environ if environ is None else environ
    raw = e.get(env.NVRX_OTEL_LOGFLOW_PARENT)
    if not raw:
        return None
    try:
        data = orjson.loads(raw)
        pid = int(data.pop("pid"))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        env.warn_once(f"{env.NVRX_OTEL_LOGFLOW_PARENT} is malformed; ignoring it")
        return None
    if pid == os.getpid():
        return None
    where = f"the parent process's settings ({env.NVRX_OTEL_LOGFLOW_PARENT}, pid {pid})"
    return Layer(where, {k: v for k, v in data.items() if k in _BY_KEY and v is not None})


def export_for_children(settings: Settings, log_dir: Path, script_name: str) -> None:
    """Put the resolved settings where spawned children find them (the environment)."""
    data: dict[str, Any] = {
        "pid": os.getpid(),
        "log_dir": str(log_dir),
        "script_name": script_name,
        "file_level": settings.file_level,
        "console_level": settings.console_level,
        "rotation_on_startup": settings.rotation_on_startup,
        "retention": settings.retention,
        "enqueue": settings.enqueue,
        "diagnose": settings.diagnose,
        "module_levels": {r.prefix: r.as_config() for r in settings.module_levels},
        "file_per": settings.file_per,
        "file_format": settings.file_format,
        "rotation_size": settings.rotation_size,
        "rotation_interval": settings.rotation_interval,
        "compression": settings.compression,
    }
    os.environ[env.NVRX_OTEL_LOGFLOW_PARENT] = orjson.dumps(data).decode()


def forget_export() -> None:
    """Remove what :func:`export_for_children` set, if this process set it."""
    layer_raw = os.environ.get(env.NVRX_OTEL_LOGFLOW_PARENT)
    if not layer_raw:
        return
    try:
        mine = orjson.loads(layer_raw).get("pid") == os.getpid()
    except (orjson.JSONDecodeError, AttributeError):
        mine = False
    if mine:
        del os.environ[env.NVRX_OTEL_LOGFLOW_PARENT]


# --- resolving -----------------------------------------------------------------------------


def _checked(setting: Setting, value: Any, where: str) -> Any:
    try:
        return setting.check(value)
    except Invalid as exc:
        key = exc.key or setting.key
        shown = exc.value if exc.key is not None else value
        raise _fail(key, shown, where, exc.expected) from None


def resolve(
    arguments: Mapping[str, Any],
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    strict_env: bool = False,
) -> Settings:
    """The settings from ``arguments`` (None = not given) and the other layers; raises
    ``ValueError`` for an unknown key or an invalid value anywhere, except an invalid
    ``NVRX_OTEL_LOGURU_*`` variable (unless ``strict_env``): that one is said once on
    stderr and left out, as nvrx-otel's other variables are."""
    unknown = set(arguments) - set(_BY_KEY)
    if unknown:
        raise TypeError(f"configure_logging() got unknown arguments: {', '.join(sorted(unknown))}")
    layers = [Layer(ARGUMENT, {k: v for k, v in arguments.items() if v is not None})]
    parent = parent_layer(environ)
    if parent is not None:
        layers.append(parent)
    layers.append(env_layer(environ))
    layers.extend(file_layers(cwd, environ))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in layers:  # check every value in every layer, not only the winners
        for key, raw in layer.values.items():
            where = layer.source(key)
            try:
                value = _checked(_BY_KEY[key], raw, where)
            except ValueError as exc:
                if strict_env or not where.startswith(_OUR_ENV):
                    raise
                # nvrx-otel's own variables never stop a rank: said once, default used
                env.warn_once(f"{exc}; using the next source or the default")
                continue
            if key not in values:
                values[key] = value
                sources[key] = layer.source(key)
    for setting in TABLE:
        if setting.key not in values:
            values[setting.key] = setting.default
            sources[setting.key] = "default"
    return Settings(**values, sources=sources, inherited=parent is not None)
