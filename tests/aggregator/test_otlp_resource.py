"""One resource for both paths: what a rank's records and spans carry through the spool and
the aggregator (to an OTLP endpoint and to OTLP/JSON files) is the resource the SDK makes
for that rank's environment: ``service.name`` from ``OTEL_SERVICE_NAME``, the SDK's
``telemetry.sdk.*``, the ``OTEL_RESOURCE_ATTRIBUTES`` keys, the identity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from nvrx_otel import semconv
from tests.aggregator.spoolkit import process_env, wait_for
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver

RANK = """
import json, sys
from opentelemetry.sdk.resources import Resource
from nvrx_otel.identity import get_identity
from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import FtSpanKind
from nvrx_otel.tracing import ft_span, setup_tracing

log = setup_logger()
setup_tracing()
with ft_span(FtSpanKind.CYCLE, cycle=0):
    log.info("inside the cycle")
ident = get_identity()
print(json.dumps({
    "sdk_path": dict(ident.resource().attributes),
    "sdk_itself": dict(Resource.create(ident.attributes()).attributes),
}), flush=True)
"""

RANK_ENV = {
    "OTEL_SERVICE_NAME": "trainer",
    "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging, team = ml%20infra,bad",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "SLURM_JOB_ID": "4242",
}


def _json_value(v: dict[str, Any]) -> Any:
    ((kind, value),) = v.items()
    return int(value) if kind == "intValue" else value


def _json_resources(path: Path, key: str) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        for r in json.loads(line)[key]:
            out.append({a["key"]: _json_value(a["value"]) for a in r["resource"]["attributes"]})
    return out


def _run(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = spawn(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    return result


def test_spool_path_carries_the_sdk_resource(tmp_path: Path, receiver: OtlpReceiver) -> None:
    # The aggregator's own service name must not leak into the ranks' resources.
    agg_env = process_env(tmp_path, "node-a", SLURM_JOB_ID="4242", OTEL_SERVICE_NAME="agg")
    agg = spawn(
        [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp_path / "logs"),
         "--wait-file", str(tmp_path / "wait"), "--check-interval", "0.1",
         "--otlp-endpoint", receiver.endpoint, "--otlp-json", str(tmp_path / "otlp")],
        env=agg_env, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        rank = _run([sys.executable, "-c", RANK], process_env(tmp_path, "node-a", **RANK_ENV))
        expected = rank["sdk_itself"]
        assert rank["sdk_path"] == expected  # our SDK path: the SDK's own Resource.create
        assert expected[semconv.SERVICE_NAME] == "trainer"
        assert expected["deployment.environment.name"] == "staging"
        assert expected["team"] == "ml infra"
        assert expected[semconv.TELEMETRY_SDK_NAME] == "opentelemetry"
        assert expected[semconv.TELEMETRY_SDK_LANGUAGE] == "python"
        assert expected[semconv.TELEMETRY_SDK_VERSION]
        assert (expected[semconv.WORKLOAD_RANK], expected[semconv.JOB_ID]) == (3, "4242")

        assert receiver.wait_for(lambda r: len(r.logs) >= 1 and len(r.spans) >= 1, 60)
        logs_file = tmp_path / "otlp" / "logs_node-a.jsonl"
        traces_file = tmp_path / "otlp" / "traces_node-a.jsonl"
        wait_for(lambda: logs_file.exists() and traces_file.exists(), 60, "the OTLP/JSON files")
        wait_for(lambda: logs_file.read_text().endswith("\n"), 60, "a whole OTLP/JSON line")
    finally:
        (tmp_path / "wait").touch()
        _, err = agg.communicate(timeout=90)
    assert agg.returncode == 0, err.decode()

    (log,) = [x for x in receiver.logs if x["body"] == "inside the cycle"]
    (span,) = receiver.spans
    assert log["resource"] == expected
    assert span["resource"] == expected
    assert _json_resources(logs_file, "resourceLogs") == [expected]
    assert _json_resources(traces_file, "resourceSpans") == [expected]


def test_sdk_path_exports_the_same_resource(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """A rank without a spool exports its spans through the SDK: same env, same resource
    (but for what belongs to the process)."""
    env = process_env(tmp_path, "node-a", **RANK_ENV, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    del env["NVRX_NODE_LOCAL_TMPDIR"]
    rank = _run([sys.executable, "-c", RANK], env)
    assert receiver.wait_for(lambda r: len(r.spans) >= 1, 60)
    (span,) = receiver.spans
    assert span["resource"] == rank["sdk_itself"] == rank["sdk_path"]
