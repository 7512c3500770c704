"""Helpers for the loguru front-end tests: run-file lines, scripts in real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson

from tests.aggregator.spoolkit import NO_WATCHER

LINE = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}) \| (?P<level>[A-Z]+) *"
    r" \| (?P<tag>\[rank \d+\] \| )?(?P<name>[^:]+):(?P<fn>[^:]+):(?P<line>\d+) \| (?P<msg>.*)$"
)
"""LogFlow's run-file line:
``YYYY-MM-DD HH:mm:ss.SSS | LEVEL    | [rank N] | name:fn:line | msg``."""

CONSOLE = re.compile(
    r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \| (?P<level>[A-Z]+) * \| "
    r"(?P<name>[^:]+):(?P<fn>[^:]+):(?P<line>\d+) \| (?P<msg>.*)$"
)
"""LogFlow's console line (no milliseconds, no rank tag: only rank 0 prints)."""

REPO = Path(__file__).resolve().parents[3]
_STRIP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
          "SLURM_", "OMPI_", "PMI", "MPI_", "TORCHELASTIC_", "NVRX_", "LOGFLOW_", "OTEL_",
          "NO_COLOR", "FORCE_COLOR", "XDG_CONFIG_HOME")  # fmt: skip


def run_file_lines(path: Path) -> list[dict[str, str]]:
    """The record lines of a run file, parsed (continuation lines left out)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = LINE.match(line)
        if m:
            out.append(m.groupdict())
    return out


def messages(path: Path) -> list[str]:
    return [line["msg"] for line in run_file_lines(path)]


def spool_logs(root: Path) -> list[dict[str, Any]]:
    """Every ``k: "log"`` record under a spool root."""
    out = []
    for path in sorted(root.rglob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            if raw.strip():
                rec = orjson.loads(raw)
                if rec.get("k") == "log":
                    out.append(rec)
    return out


def script_env(tmp: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a child interpreter (no launcher or logging variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP)}
    env["XDG_CONFIG_HOME"] = str(tmp / "xdg")
    env.update(NO_WATCHER)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_script(
    tmp: Path, name: str, code: str, *, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Write ``code`` to ``tmp/<name>.py`` and run it there in a fresh interpreter."""
    path = tmp / f"{name}.py"
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp,
        env=script_env(tmp, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_file_handler() -> Any:
    """loguru's handler of the default text run file (the one whose emit ``TextFile`` has)."""
    from loguru import logger

    from nvrx_otel.logging.logflow.textfile import TextFile

    handlers = logger._core.handlers.values()  # type: ignore[attr-defined]
    (handler,) = [h for h in handlers if isinstance(getattr(h._sink, "_stream", None), TextFile)]
    return handler


def loguru_reference(tmp_path: Path) -> Path:
    """loguru's own file sink, in the run file's format, beside the run file: the bytes the
    run file must match."""
    from loguru import logger

    fmt = run_file_handler()._decolorized_format[: -len("\n{exception}")]
    path = tmp_path / "reference.log"
    logger.add(
        str(path), format=fmt, level="TRACE", colorize=False, diagnose=False,
        encoding="utf-8", errors="backslashreplace",
    )  # fmt: skip
    return path
