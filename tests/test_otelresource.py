"""The process's resource attributes are what the SDK's ``Resource.create`` makes from the
identity attributes, for every environment the SDK reads, and spool headers carry them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.version import __version__ as sdk_version

from nvrx_otel import otelresource, semconv
from nvrx_otel.identity import resolve
from nvrx_otel.spool.writer import SpoolWriter
from tests.conftest import read_spool

HOST = "host-a"


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_SERVICE_NAME": "trainer"},
        {"OTEL_RESOURCE_ATTRIBUTES": "team=llm,region=eu-west"},
        # percent-decoding, spaces around keys and values, '=' inside a value
        {"OTEL_RESOURCE_ATTRIBUTES": " team = ml%20infra ,query=a=b%2Cc"},
        # malformed items and an empty key are skipped
        {"OTEL_RESOURCE_ATTRIBUTES": "novalue,=x,ok=1,,"},
        # OTEL_SERVICE_NAME beats the attribute list; an empty one does not count
        {"OTEL_SERVICE_NAME": "svc", "OTEL_RESOURCE_ATTRIBUTES": "service.name=other"},
        {"OTEL_SERVICE_NAME": "", "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-list"},
        {"OTEL_RESOURCE_ATTRIBUTES": "service.name="},  # empty: the default name
        # the list may override the SDK's own keys; the identity overrides the list
        {"OTEL_RESOURCE_ATTRIBUTES": "telemetry.sdk.language=go,host.name=x,nv.nvrx.node.id=y"},
        {"OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "otel,service_instance"},  # built-in only
    ],
)
def test_same_as_the_sdk_makes(environ: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    ident = resolve({"RANK": "2", "NVRX_OTEL_NODE_ID": "n1"}, host_name=HOST, pid=77)
    ours = ident.resource_attributes()
    assert ours == dict(Resource.create(ident.attributes()).attributes)
    assert dict(ident.resource().attributes) == ours
    assert ours[semconv.NODE_ID] == "n1" and ours[semconv.HOST_NAME] == HOST


def test_extra_detectors_run_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A detector beyond the built-in ones is the SDK's to run; both paths get its keys."""
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "process")
    ident = resolve({}, host_name=HOST, pid=77)
    ours = ident.resource_attributes()
    assert "process.runtime.name" in ours
    sdk = dict(Resource.create(ident.attributes()).attributes)
    assert {k: v for k, v in ours.items() if k != semconv.PROCESS_PID} == {
        k: v for k, v in sdk.items() if k != semconv.PROCESS_PID
    }


def test_sdk_version_is_the_installed_sdks() -> None:
    assert otelresource.sdk_version() == sdk_version


def test_sdk_version_without_the_sdk_loaded(tmp_path: Path) -> None:
    """Read from the version module's source: the SDK stays unloaded."""
    code = (
        "import sys\n"
        "from nvrx_otel import otelresource\n"
        "v = otelresource.sdk_version()\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')], 'loaded'\n"
        "print(v)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == sdk_version


def test_a_malformed_item_is_reported_once(capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"OTEL_RESOURCE_ATTRIBUTES": "team=a,oops"}
    for _ in range(3):
        assert otelresource.from_environment(environ) == {"team": "a"}
    err = capsys.readouterr().err
    assert err.count("OTEL_RESOURCE_ATTRIBUTES: ignoring 'oops'") == 1


def test_spool_header_carries_the_resource(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=llm")
    monkeypatch.setenv("RANK", "5")
    writer = SpoolWriter(tmp_path / "spool")
    try:
        writer.emit({"k": "log", "ts": 1, "sev": 9, "lvl": "INFO", "lg": "t", "msg": "hello"})
    finally:
        writer.close()
    (header,) = [r for r in read_spool(tmp_path / "spool") if r["k"] == "hdr"]
    assert header["res"][semconv.SERVICE_NAME] == "trainer"
    assert header["res"]["team"] == "llm"
    assert header["res"][semconv.WORKLOAD_RANK] == 5
    assert header["res"][semconv.TELEMETRY_SDK_VERSION] == sdk_version
