"""Fixtures for the collector tests: the built binary and collectors that never outlive a test,
and for the Kafka tests a real broker that never outlives its module.

The binary comes from ``NVRX_OTEL_COLLECTOR_BIN`` or else from ``scripts/build-collector.sh``
(which builds it once and then reuses the cached build). Without Go the script exits 3 and
every collector test fails with its one line saying what to install; deselect these tests
with ``-m 'not collector'`` for a Python-only run. The broker's jars come from
``NVRX_OTEL_KAFKA_LIB`` or else from ``scripts/fetch-kafka.sh`` (Maven, cached likewise);
without Java or Maven the Kafka tests fail with its one line (``-m 'not kafka'``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvrx_otel import env
from tests.collector.harness import BUILD_SCRIPT, Collector
from tests.collector.kafka import FETCH_SCRIPT, KafkaBroker

# Read at import: the suite's autouse clean_env fixture removes NVRX_* from os.environ.
BIN_FROM_ENV = os.environ.get(env.NVRX_OTEL_COLLECTOR_BIN, "").strip()
CACHE_FROM_ENV = os.environ.get(env.NVRX_OTEL_COLLECTOR_CACHE, "").strip()
KAFKA_LIB_FROM_ENV = os.environ.get(env.NVRX_OTEL_KAFKA_LIB, "").strip()
KAFKA_CACHE_FROM_ENV = os.environ.get(env.NVRX_OTEL_KAFKA_CACHE, "").strip()
GO_MISSING_EXIT = 3
JAVA_MISSING_EXIT = 3


def build_script_env() -> dict[str, str]:
    environ = dict(os.environ)
    if CACHE_FROM_ENV:
        environ[env.NVRX_OTEL_COLLECTOR_CACHE] = CACHE_FROM_ENV
    return environ


@pytest.fixture(scope="session")
def collector_bin() -> Path:
    """The otelcol-nvrx binary: NVRX_OTEL_COLLECTOR_BIN, else built or reused by the script."""
    if BIN_FROM_ENV:
        path = Path(BIN_FROM_ENV)
        if not (path.is_file() and os.access(path, os.X_OK)):
            pytest.fail(
                f"{env.NVRX_OTEL_COLLECTOR_BIN}={BIN_FROM_ENV!r} is not an executable file",
                pytrace=False,
            )
        return path
    proc = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, env=build_script_env()
    )
    if proc.returncode == GO_MISSING_EXIT:
        pytest.fail(proc.stderr.strip().splitlines()[-1], pytrace=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        pytest.fail(
            f"scripts/build-collector.sh failed ({proc.returncode}):\n{tail}", pytrace=False
        )
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def make_collector(collector_bin: Path, tmp_path: Path) -> Iterator[Callable[..., Collector]]:
    """``make_collector(name, configs, env, health_port, feature_gates=())``: a Collector (not
    yet started) whose log is ``<tmp_path>/<name>.log``; every one is stopped at teardown."""
    made: list[Collector] = []

    def make(
        name: str,
        configs: list[str | Path],
        environ: dict[str, str],
        health_port: int,
        feature_gates: tuple[str, ...] = (),
    ) -> Collector:
        c = Collector(
            binary=collector_bin,
            configs=configs,
            env=environ,
            health_port=health_port,
            log_path=tmp_path / f"{name}.log",
            feature_gates=feature_gates,
        )
        made.append(c)
        return c

    yield make
    errors = []
    for c in reversed(made):
        try:
            c.stop(timeout=10)  # a no-op for one the test stopped; kills after the timeout
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="session")
def kafka_lib() -> Path:
    """The Kafka broker's jar directory: NVRX_OTEL_KAFKA_LIB, else fetched or reused by
    scripts/fetch-kafka.sh."""
    if KAFKA_LIB_FROM_ENV:
        path = Path(KAFKA_LIB_FROM_ENV)
        if not any(path.glob("kafka_2.13-*.jar")):
            pytest.fail(
                f"{env.NVRX_OTEL_KAFKA_LIB}={KAFKA_LIB_FROM_ENV!r} holds no kafka_2.13 jar",
                pytrace=False,
            )
        return path
    environ = dict(os.environ)
    if KAFKA_CACHE_FROM_ENV:
        environ[env.NVRX_OTEL_KAFKA_CACHE] = KAFKA_CACHE_FROM_ENV
    proc = subprocess.run([str(FETCH_SCRIPT)], capture_output=True, text=True, env=environ)
    if proc.returncode == JAVA_MISSING_EXIT:
        pytest.fail(proc.stderr.strip().splitlines()[-1], pytrace=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        pytest.fail(f"scripts/fetch-kafka.sh failed ({proc.returncode}):\n{tail}", pytrace=False)
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def kafka_broker(
    kafka_lib: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    """One formatted, started and ready broker for the module, stopped at its end. A test
    that kills it must start it again (same data) before it returns."""
    broker = KafkaBroker(kafka_lib, tmp_path_factory.mktemp("kafka")).format()
    try:
        yield broker.start().wait_ready()
    finally:
        broker.stop()
