"""Fixtures for tracing tests: a fresh global tracer provider per test, spool readers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel.tracing import reset_tracing
from tests.conftest import read_spool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No provider, no TRACEPARENT from outside, before and after every test."""
    monkeypatch.delenv("TRACEPARENT", raising=False)
    monkeypatch.delenv("TRACESTATE", raising=False)
    reset_tracing()
    yield
    reset_tracing()


def spans(directory: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The span records under ``directory`` (``kind``: "span_start" or "span_end")."""
    kinds = {kind} if kind else {"span_start", "span_end"}
    return [r for r in read_spool(directory) if r["k"] in kinds]


def ended(directory: Path) -> dict[str, dict[str, Any]]:
    """The span_end records under ``directory`` by span name (names must be unique)."""
    out: dict[str, dict[str, Any]] = {}
    for r in spans(directory, "span_end"):
        assert r["name"] not in out, f"two spans named {r['name']}"
        out[r["name"]] = r
    return out


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this venv, from the repository root."""
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
