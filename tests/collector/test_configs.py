"""The collector configs: every one (and every documented overlay combination) validates
against the built binary, broken ones fail, and the names in them are the current ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from nvrx_otel import record as rec
from nvrx_otel import semconv
from tests.collector.harness import CONFIG_DIR, MakeCollector, Ports, agent_env, run_validate

# Each entry is one documented way to run the collector (base config, then overlays).
COMBINATIONS: dict[str, tuple[list[str], dict[str, str]]] = {
    "agent": (["agent.yaml"], {}),
    "agent-filelog": (["agent.yaml", "agent-filelog.yaml"], {}),
    "agent-scaleout": (["agent.yaml", "agent-scaleout.yaml"], {}),
    "agent-filelog-scaleout": (["agent.yaml", "agent-filelog.yaml", "agent-scaleout.yaml"], {}),
    "agent-debug": (["agent.yaml", "debug.yaml"], {}),
    "agent-auth": (
        ["agent.yaml", "agent-auth.yaml"],
        {"NVRX_OTEL_GATEWAY_CA_FILE": "/ca.pem", "NVRX_OTEL_GATEWAY_TOKEN_FILE": "/token"},
    ),
    "gateway": (["gateway.yaml"], {}),
    "gateway-auth": (
        ["gateway.yaml", "gateway-auth.yaml"],
        {
            "NVRX_OTEL_GATEWAY_TLS_CERT_FILE": "/cert.pem",
            "NVRX_OTEL_GATEWAY_TLS_KEY_FILE": "/key.pem",
            "NVRX_OTEL_GATEWAY_TOKEN_FILE": "/token",
        },
    ),
    "agent-kafka": (["agent.yaml", "agent-kafka.yaml"], {}),
    "agent-filelog-kafka": (["agent.yaml", "agent-filelog.yaml", "agent-kafka.yaml"], {}),
    "gateway-kafka": (["gateway.yaml", "gateway-kafka.yaml"], {}),
    "gateway-backend-debug": (
        ["gateway.yaml", "gateway-backend.yaml", "debug.yaml"],
        {"NVRX_OTEL_BACKEND_ENDPOINT": "http://127.0.0.1:4318"},
    ),
}

DEPRECATED_TYPES = {
    "exporters": {"otlp", "otlphttp", "loadbalancing"},
    "receivers": {"filelog"},
}
"""Type names renamed to snake_case (old names still load, with a deprecation warning)."""


@pytest.mark.collector
def test_every_config_file_is_covered() -> None:
    """A new config file must be added to COMBINATIONS (so it is validated)."""
    used = {name for configs, _ in COMBINATIONS.values() for name in configs}
    present = {p.name for p in CONFIG_DIR.glob("*.yaml")} - {"manifest.yaml"}
    assert present == used


@pytest.mark.collector
@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_config_validates(collector_bin: Path, name: str) -> None:
    configs, environ = COMBINATIONS[name]
    proc = run_validate(collector_bin, configs, environ)
    assert proc.returncode == 0, proc.stderr


BROKEN = {
    # A pipeline naming an exporter that is not configured.
    "missing-exporter": "service:\n  pipelines:\n    logs:\n      exporters: [otlp_grpc/nowhere]\n",
    # A misspelt option.
    "misspelt-key": "exporters:\n  otlp_grpc/gateway:\n    endpiont: 127.0.0.1:1\n",
    # A component type that is not in the distribution.
    "unknown-type": "receivers:\n  prometheus: {}\nservice:\n  pipelines:\n    logs:\n"
    "      receivers: [otlp, prometheus]\n",
}


@pytest.mark.collector
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_config_fails_validation(collector_bin: Path, tmp_path: Path, case: str) -> None:
    overlay = tmp_path / "broken.yaml"
    overlay.write_text(BROKEN[case])
    proc = run_validate(collector_bin, ["agent.yaml", overlay])
    assert proc.returncode != 0
    needle = {"missing-exporter": "otlp_grpc/nowhere", "misspelt-key": "endpiont"}.get(
        case, "prometheus"
    )
    assert needle in proc.stderr


@pytest.mark.collector
def test_backend_overlay_without_its_endpoint_fails(collector_bin: Path) -> None:
    proc = run_validate(collector_bin, ["gateway.yaml", "gateway-backend.yaml"])
    assert proc.returncode != 0
    assert "otlp_http/backend" in proc.stderr


@pytest.mark.collector
def test_auth_overlay_without_its_files_fails(collector_bin: Path) -> None:
    """No token file, certificate or key: the gateway refuses the config rather than run
    without authentication or TLS."""
    proc = run_validate(collector_bin, ["gateway.yaml", "gateway-auth.yaml"])
    assert proc.returncode != 0
    assert "bearertokenauth/gateway" in proc.stderr and "certificate and key" in proc.stderr


@pytest.mark.collector
def test_start_catches_what_validate_cannot(
    collector_bin: Path, tmp_path: Path, make_collector: MakeCollector
) -> None:
    """A misspelt storage extension ID passes validate but the collector refuses to start."""
    overlay = tmp_path / "typo.yaml"
    overlay.write_text(
        "exporters:\n  otlp_grpc/gateway:\n    sending_queue:\n      storage: file_storage/typo\n"
    )
    assert run_validate(collector_bin, ["agent.yaml", overlay]).returncode == 0
    (ports,) = Ports.pick()
    env = agent_env(ports, tmp_path / "storage", gateway_grpc=1)
    agent = make_collector("agent", ["agent.yaml", overlay], env, ports.health).start()
    assert agent.proc is not None
    assert agent.proc.wait(30) != 0
    assert "no storage client extension found" in agent.log_text()


def _component_types(config: dict, kind: str) -> set[str]:
    return {key.split("/")[0] for key in (config.get(kind) or {})}


@pytest.mark.collector
@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_configs_use_current_type_names(path: Path) -> None:
    if path.name == "manifest.yaml":
        return
    config = yaml.safe_load(path.read_text())
    for kind, old in DEPRECATED_TYPES.items():
        assert not _component_types(config, kind) & old, f"{path.name}: deprecated {kind}"


@pytest.mark.collector
def test_attribute_names_in_configs_are_semconv() -> None:
    """Every nv.nvrx.* name in the configs, and every attribute key the filelog mapping
    sets, is a semantic-convention constant (the aggregator's OTLP output uses the same)."""
    known = {v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str)}
    text = "\n".join(p.read_text() for p in CONFIG_DIR.glob("*.yaml"))
    nvrx = set(re.findall(r"nv\.nvrx\.[a-z_.]*[a-z_]", text))
    assert nvrx
    assert nvrx <= known, nvrx - known
    mapped = set(re.findall(r'set\(log\.attributes\["([^"]+)"\]', text))
    assert mapped
    assert mapped <= known, mapped - known


def test_filelog_mode_parses_exactly_the_fields_the_codec_writes() -> None:
    """The filelog overlay reads spool lines itself: the fields its operators and statements
    use, and the raw fields it removes, are the fields of the codec's table for the lines it
    maps (``log`` and ``drop``); its header pattern matches the codec's header line and
    takes ``res`` from it. Runs without the collector binary."""
    text = (CONFIG_DIR / "agent-filelog.yaml").read_text()
    config = yaml.safe_load(text)
    receiver = config["receivers"]["file_log/spool"]
    internal = {"hdr_res"}  # the header's resource, carried by the overlay itself
    used = set(re.findall(r"attributes\.([a-z_]+)\b", text))
    used |= set(re.findall(r'log\.attributes\["([a-z_]+)"\]', text))
    (raw,) = re.findall(r'delete_matching_keys\(log\.attributes, "\^\(([^)]*)\)\$"\)', text)
    removed = set(raw.split("|"))
    mapped = rec.FIELDS[rec.KIND_LOG] | rec.FIELDS[rec.KIND_DROP]
    assert removed == mapped, (removed - mapped, mapped - removed)
    assert used - internal <= mapped, used - internal - mapped
    header = rec.header_line(
        writer_id="00000000000000aa", index=0, ts=1, pid=2, ppid=1, proc="rank0",
        budget=1 << 20, max_file_size=1 << 16, resource={"service.name": "x", "n": {"a": 1}},
    ).rstrip(b"\n").decode()  # fmt: skip
    assert re.match(receiver["header"]["pattern"], header)
    (op,) = receiver["header"]["metadata_operators"]
    found = re.search(op["regex"], header)
    assert found is not None
    assert yaml.safe_load(found.group("hdr_res")) == {"service.name": "x", "n": {"a": 1}}
    assert rec.FIELDS[rec.KIND_HEADER] >= {"res", "budget", "max"}
