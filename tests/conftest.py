"""Shared fixtures: a clean environment and a clean "nvrx" logger for every test."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from nvrx_otel import envparse, identity
from nvrx_otel.logging import fastpath

_LAUNCHER_PREFIXES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                      "NODE_RANK", "SLURM_", "OMPI_", "PMI", "MPI_", "TORCHELASTIC_", "NVRX_",
                      "LOGFLOW_", "OTEL_")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher, NVRX or OTEL variables leak in from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith(_LAUNCHER_PREFIXES):
            monkeypatch.delenv(name)
    # A test process (and the ranks it starts) has no watcher unless a test asks for one:
    # pytest's own capture holds fd 1 and 2, and its faulthandler the fatal signals.
    monkeypatch.setenv("NVRX_OTEL_CAPTURE_OUTPUT", "off")
    monkeypatch.setenv("NVRX_OTEL_CAPTURE_STACKS", "off")
    identity.clear_identity()
    envparse._warned.clear()  # each test sees its own one-time warnings
    yield
    identity.clear_identity()
    logger = logging.getLogger("nvrx")
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    fastpath.uninstall(logger)


_spawned: list[subprocess.Popen[Any]] = []


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real file system of ``size`` mounted at ``path`` (needs root; a failed mount fails
    the test), unmounted when the block ends."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` whose process is killed when the test ends, passed or failed."""
    proc: subprocess.Popen[Any] = subprocess.Popen(*args, **kwargs)
    _spawned.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    while _spawned:
        proc = _spawned.pop()
        if proc.poll() is None:
            proc.kill()
        try:
            proc.communicate(timeout=30)
        except (ValueError, OSError, subprocess.TimeoutExpired):
            pass


def read_spool(directory: Path) -> list[dict[str, Any]]:
    """Every line of every spool file under ``directory`` (headers included), parsed."""
    out: list[dict[str, Any]] = []
    for path in sorted(directory.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            out.append(orjson.loads(line))
    return out


def log_records(directory: Path) -> list[dict[str, Any]]:
    return [r for r in read_spool(directory) if r["k"] == "log"]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A scratch directory under /tmp (0755, root's) that other users can reach, unlike
    ``tmp_path`` (its parents are 0700): for tests that act as another user
    (:func:`as_nobody`)."""
    path = Path(tempfile.mkdtemp(prefix="nvrx-shared-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_nobody(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as the real user ``nobody`` (the tests run as root), failing the test
    if it fails."""
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", *argv], input=stdin, capture_output=True
    )
    assert done.returncode == 0, f"as nobody: {argv}: {done.stderr.decode(errors='replace')}"
    return done
