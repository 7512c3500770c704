"""scripts/fetch-kafka.sh: one line naming what to install without Java or Maven; a fetched
broker is reused at once."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from nvrx_otel import env
from tests.collector.conftest import JAVA_MISSING_EXIT, KAFKA_CACHE_FROM_ENV, KAFKA_LIB_FROM_ENV
from tests.collector.kafka import FETCH_SCRIPT

pytestmark = pytest.mark.kafka


def script_cache_root() -> Path:
    if KAFKA_CACHE_FROM_ENV:
        return Path(KAFKA_CACHE_FROM_ENV)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "nvrx-otel" / "kafka"


@pytest.mark.parametrize("present", ["nothing", "java"])
def test_without_java_or_maven_the_script_fails_with_one_line(tmp_path: Path, present: str) -> None:
    bindir = tmp_path / "bin"  # a PATH without Maven (and without Java, unless asked)
    bindir.mkdir()
    if present == "java":
        fake = bindir / "java"
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
    proc = subprocess.run(
        ["/bin/bash", str(FETCH_SCRIPT)],
        capture_output=True,
        text=True,
        env={"PATH": str(bindir), "HOME": str(tmp_path)},
        timeout=30,
    )
    assert proc.returncode == JAVA_MISSING_EXIT
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "install Java >= 17 and Maven" in line
    assert "-m 'not kafka'" in line
    assert ("mvn is not installed" if present == "java" else "java is not installed") in line


def test_a_fetched_broker_is_reused_at_once(kafka_lib: Path) -> None:
    root = script_cache_root()
    if KAFKA_LIB_FROM_ENV and root not in kafka_lib.parents:
        pytest.skip("NVRX_OTEL_KAFKA_LIB names a directory outside the fetch script's cache")
    environ = dict(os.environ)
    if KAFKA_CACHE_FROM_ENV:
        environ[env.NVRX_OTEL_KAFKA_CACHE] = KAFKA_CACHE_FROM_ENV
    start = time.monotonic()
    proc = subprocess.run(
        [str(FETCH_SCRIPT)], capture_output=True, text=True, env=environ, timeout=60
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == kafka_lib
    assert proc.stderr == ""  # nothing resolved, nothing downloaded
    assert elapsed < 5  # no JVM, no Maven: a file comparison
    assert any(kafka_lib.glob("kafka_2.13-4.*.jar"))
    assert any(kafka_lib.glob("slf4j-simple-*.jar"))  # the broker logs
