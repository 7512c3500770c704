"""The nvrx-otel command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx_otel import __version__


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "SLURM"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "nvrx_otel.cli", *args],
        capture_output=True, text=True, env=full_env, timeout=60,
    )  # fmt: skip


def test_version() -> None:
    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"nvrx-otel {__version__}"


def test_help_lists_commands() -> None:
    out = _run("--help")
    assert out.returncode == 0
    assert "demo" in out.stdout and "identity" in out.stdout


def test_identity_json() -> None:
    out = _run("identity", "--json", env={"RANK": "4", "NVRX_OTEL_NODE_ID": "n9"})
    assert out.returncode == 0, out.stderr
    attrs = json.loads(out.stdout)
    assert attrs["nv.nvrx.workload.rank"] == 4 and attrs["nv.nvrx.node.id"] == "n9"


def test_identity_strict_fails_with_one_clear_line() -> None:
    out = _run("identity", "--strict", env={"RANK": "abc"})
    assert out.returncode == 2
    assert out.stderr.strip() == "nvrx-otel: error: RANK='abc': expected a whole number >= 0"


def test_demo_runs_without_any_server(tmp_path: Path) -> None:
    """The README's first command: no options, no collector, output under the cwd. Run
    deep down, its paths are wider than the console (piped: 120 columns) and still come
    out whole, one line each, ready to copy."""
    cwd = tmp_path / ("d" * 80) / ("e" * 80)
    cwd.mkdir(parents=True)
    out = subprocess.run(
        [sys.executable, "-m", "nvrx_otel.cli", "demo", "--steps", "3"],
        capture_output=True, text=True, cwd=cwd, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (run,) = (cwd / "nvrx-otel-demo").iterdir()
    assert "the job finished" in out.stdout, out.stdout
    assert f"writing to {run}\n" in out.stdout, out.stdout
    assert f" logs {run / 'logs'}\n" in out.stdout, out.stdout  # nvrx-otel or python -m
    assert f"--perfetto {run / 'trace.json'}\n" in out.stdout, out.stdout
    for label in ("read them with: ", "picture them:   "):  # they run as printed
        (line,) = [x for x in out.stdout.splitlines() if x.startswith(label)]
        ran = subprocess.run(line[len(label) :], shell=True, capture_output=True, text=True,
                             cwd=cwd, timeout=240)  # fmt: skip
        assert ran.returncode == 0, (line, ran.stderr)
    assert (run / "trace.json").stat().st_size > 0
    assert sorted(p.name for p in (run / "logs").iterdir()) == [
        "nvrx_log_node0.log",
        "nvrx_log_node1.log",
    ]


@pytest.mark.parametrize(
    "command", ["demo", "logs", "report", "identity", "aggregate", "lnav-install", "doctor"]
)
def test_every_command_help_shows_an_example(command: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nvrx_otel.cli", command, "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.lower()
    assert "example" in text and f"nvrx-otel {command} " in text, proc.stdout
