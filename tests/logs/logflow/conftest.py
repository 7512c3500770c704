"""Every loguru front-end test starts unconfigured, in its own working directory, with its
own XDG config home, and ends with ``reset_logging()``. ``spool``: the spool root the
front end writes under (``NVRX_NODE_LOCAL_TMPDIR``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nvrx_otel.logging.logflow import reset_logging


@pytest.fixture(autouse=True)
def logflow_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    reset_logging()
    yield tmp_path
    reset_logging()


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "spool"
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(root))
    return root
