"""Authenticated OTLP against the real collector: the gateway with ``gateway-auth.yaml``
(TLS with a server certificate and a CA made in the test, bearer tokens from a file), the
aggregator exporting to it over OTLP/HTTP and OTLP/gRPC, and an agent with
``agent-auth.yaml`` in front of it.

Ledger (per protocol): 50 records emitted; with a wrong token the gateway has none, the
aggregator says HTTP 401 / UNAUTHENTICATED loudly, counts 0 dropped and leaves all 50 in
the spool; restarted with the right token it delivers all 50, 0 dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx_otel import semconv
from tests.aggregator.spoolkit import FakeWriter, cli, finish, spool_dir, started, wait_for
from tests.collector.harness import (
    MakeCollector,
    Ports,
    agent_env,
    gateway_env,
    logs,
    running,
    wait_until,
)
from tests.tlskit import Pki, make_pki

pytestmark = pytest.mark.collector

TOKEN = "gateway-token-4f1c"
RECORDS = 50


def _auth_env(pki: Pki, tokens: Path) -> dict[str, str]:
    return {
        "NVRX_OTEL_GATEWAY_TLS_CERT_FILE": str(pki.server_cert),
        "NVRX_OTEL_GATEWAY_TLS_KEY_FILE": str(pki.server_key),
        "NVRX_OTEL_GATEWAY_TOKEN_FILE": str(tokens),
    }


def _token_file(path: Path, token: str) -> Path:
    path.write_text(f"{token} # the test's token\n")
    return path


def _keys(output: Path, prefix: str) -> set[str]:
    return {
        r["attributes"][semconv.RECORD_KEY]
        for r in logs(output)
        if isinstance(r["body"], str) and r["body"].startswith(prefix)
    }


def _spooled_logs(tmp: Path) -> int:
    return sum(
        p.read_bytes().count(b'"k":"log"')
        for p in spool_dir(tmp).iterdir()
        if p.name.endswith(".jsonl")
    )


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_wrong_token_is_refused_reported_and_kept_until_the_right_one(
    tmp_path: Path, make_collector: MakeCollector, protocol: str
) -> None:
    if protocol == "grpc":
        pytest.importorskip("grpc")
    pki = make_pki(tmp_path / "pki")
    (ports,) = Ports.pick()
    output = tmp_path / "output"
    environ = gateway_env(ports, output, **_auth_env(pki, _token_file(tmp_path / "t", TOKEN)))
    gateway = make_collector(
        "gateway", ["gateway.yaml", "gateway-auth.yaml"], environ, ports.health
    )
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(RECORDS):
        w.log(f"authenticated {i}")
    w.close()
    port = ports.grpc if protocol == "grpc" else ports.http
    endpoint = ("--otlp-endpoint", f"https://127.0.0.1:{port}", "--drain-timeout", "3")
    base = {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca)}
    refusal = "UNAUTHENTICATED" if protocol == "grpc" else "HTTP 401"
    with running(gateway):
        wrong = {**base, "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer typo"}
        proc = cli(tmp_path, *endpoint, env=wrong)
        started(tmp_path, proc)
        wait_for(lambda: "OTLP configuration error" in proc.err(), timeout=60, what="report")
        assert refusal in proc.err() and "the credentials were refused" in proc.err()
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
        assert code == 0, err
        assert "; 0 dropped; not caught up" in err and "a configuration error" in err, err
        assert _spooled_logs(tmp_path) == RECORDS  # nothing deleted
        assert _keys(output, "authenticated ") == set()

        (tmp_path / "done").unlink()
        right = {**base, "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {TOKEN}"}
        proc = cli(tmp_path, *endpoint, env=right)
        started(tmp_path, proc)
        wait_until(
            lambda: len(_keys(output, "authenticated ")) == RECORDS,
            "every record at the gateway",
            timeout=90,
            on_fail=lambda: proc.err() + gateway.log_tail(),
        )
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
    assert code == 0, err
    assert f"exported {RECORDS} log records" in err and "; 0 dropped" in err, err
    assert "not caught up" not in err and "configuration error" not in err, err
    reported = [
        r for r in logs(output) if r["attributes"].get(semconv.DROP_REASON) == "otlp_rejected"
    ]
    assert reported == []


def test_cleartext_to_the_authenticated_gateway_carries_nothing(
    tmp_path: Path, make_collector: MakeCollector
) -> None:
    """An http:// endpoint stays cleartext: the TLS receiver answers HTTP 400 ("Client
    sent an HTTP request to an HTTPS server") or resets the connection; either is the
    sender's mistake, not bad data: said, retried, the records stay in the spool, none
    counted dropped (the 400 used to drop them)."""
    pki = make_pki(tmp_path / "pki")
    (ports,) = Ports.pick()
    output = tmp_path / "output"
    environ = gateway_env(ports, output, **_auth_env(pki, _token_file(tmp_path / "t", TOKEN)))
    gateway = make_collector(
        "gateway", ["gateway.yaml", "gateway-auth.yaml"], environ, ports.health
    )
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(10):
        w.log(f"cleartext {i}")
    w.close()
    with running(gateway):
        proc = cli(
            tmp_path,
            "--otlp-endpoint",
            f"http://127.0.0.1:{ports.http}",
            "--drain-timeout",
            "2",
            env={"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {TOKEN}"},
        )
        started(tmp_path, proc)
        # the answer, or a reset when the gateway closes before the request was read
        wait_for(
            lambda: "OTLP configuration error" in proc.err() or "export failing" in proc.err(),
            timeout=60,
            what="a report",
        )
        if "OTLP configuration error" in proc.err():
            assert "the endpoint speaks TLS, use https://" in proc.err()
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
    assert code == 0, err
    assert "; 0 dropped; not caught up" in err, err
    assert _keys(output, "cleartext ") == set() and _spooled_logs(tmp_path) == 10


def test_agent_with_the_token_delivers_to_the_authenticated_gateway(
    tmp_path: Path, make_collector: MakeCollector
) -> None:
    """agent.yaml + agent-auth.yaml against gateway.yaml + gateway-auth.yaml: the agent's
    gRPC export is TLS verified against the test CA and carries the token; a second agent
    with a wrong token delivers nothing (its records wait in its queue)."""
    pki = make_pki(tmp_path / "pki")
    gw_ports, ag_ports, bad_ports = Ports.pick(3)
    output = tmp_path / "output"
    tokens = _token_file(tmp_path / "gateway-tokens", TOKEN)
    gateway = make_collector(
        "gateway",
        ["gateway.yaml", "gateway-auth.yaml"],
        gateway_env(gw_ports, output, **_auth_env(pki, tokens)),
        gw_ports.health,
    )
    configs = ["agent.yaml", "agent-auth.yaml"]
    good = agent_env(
        ag_ports,
        tmp_path / "storage-good",
        gw_ports.grpc,
        NVRX_OTEL_GATEWAY_CA_FILE=str(pki.ca),
        NVRX_OTEL_GATEWAY_TOKEN_FILE=str(_token_file(tmp_path / "good.token", TOKEN)),
    )
    bad = agent_env(
        bad_ports,
        tmp_path / "storage-bad",
        gw_ports.grpc,
        NVRX_OTEL_GATEWAY_CA_FILE=str(pki.ca),
        NVRX_OTEL_GATEWAY_TOKEN_FILE=str(_token_file(tmp_path / "bad.token", "typo")),
    )
    agent = make_collector("agent", configs, good, ag_ports.health)
    wrong = make_collector("agent-wrong", configs, bad, bad_ports.health)
    with running(gateway, agent, wrong):
        for name, ports in (("good", ag_ports), ("bad", bad_ports)):
            (tmp_path / name / "spool").mkdir(parents=True)
            w = FakeWriter(spool_dir(tmp_path / name))
            for i in range(20):
                w.log(f"{name} {i}")
            w.close()
            proc = cli(
                tmp_path / name,
                "--otlp-endpoint",
                f"http://127.0.0.1:{ports.http}",
                "--drain-timeout",
                "5",
            )
            started(tmp_path / name, proc)
            (tmp_path / name / "done").touch()
            code, err = finish(proc, timeout=60)
            assert code == 0 and "; 0 dropped" in err, err
        wait_until(
            lambda: len(_keys(output, "good ")) == 20,
            "the good agent's records at the gateway",
            timeout=90,
            on_fail=lambda: agent.log_tail() + gateway.log_tail(),
        )
        wait_until(
            lambda: "Unauthenticated" in wrong.log_text() or "UNAUTHENTICATED" in wrong.log_text(),
            "the wrong agent refused",
            timeout=60,
            on_fail=wrong.log_tail,
        )
    assert _keys(output, "bad ") == set()
