"""scripts/build-collector.sh: one line naming what to install without Go; a cached build is
reused at once."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.collector.conftest import (
    BIN_FROM_ENV,
    CACHE_FROM_ENV,
    GO_MISSING_EXIT,
    build_script_env,
)
from tests.collector.harness import BUILD_SCRIPT


def script_cache_root() -> Path:
    if CACHE_FROM_ENV:
        return Path(CACHE_FROM_ENV)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "nvrx-otel" / "collector"


@pytest.mark.collector
@pytest.mark.parametrize("go", [None, "go1.25.3"], ids=["no-go", "old-go"])
def test_without_a_usable_go_the_script_fails_with_one_line(tmp_path: Path, go: str | None) -> None:
    bindir = tmp_path / "bin"  # a PATH with only the tools the script needs before its Go check
    bindir.mkdir()
    for tool in ("dirname", "tr"):
        found = subprocess.run(
            ["bash", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True
        )
        (bindir / tool).symlink_to(found.stdout.strip())
    if go is not None:  # a fake `go` that reports an old version
        fake = bindir / "go"
        fake.write_text(f'#!/bin/sh\nprintf "{go}\\nlinux\\namd64\\n"\n')
        fake.chmod(0o755)
    proc = subprocess.run(
        ["/bin/bash", str(BUILD_SCRIPT)],
        capture_output=True,
        text=True,
        env={"PATH": str(bindir), "HOME": str(tmp_path)},
        timeout=30,
    )
    assert proc.returncode == GO_MISSING_EXIT
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "install Go >= 1.26" in line
    assert "-m 'not collector'" in line
    if go is not None:
        assert f"found {go}" in line


@pytest.mark.collector
def test_a_cached_build_is_reused_without_building(collector_bin: Path) -> None:
    """The script finds the cached binary and builds nothing: it says nothing and returns
    in seconds (a build takes minutes; on a loaded machine even starting a shell may take
    a good part of a second, so the bound is not tighter than that)."""
    root = script_cache_root()
    if BIN_FROM_ENV and root not in collector_bin.parents:
        pytest.skip("NVRX_OTEL_COLLECTOR_BIN names a binary outside the build script's cache")
    start = time.monotonic()
    proc = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, env=build_script_env(), timeout=60
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == collector_bin
    assert proc.stderr == ""  # nothing built, nothing installed
    assert elapsed < 5
