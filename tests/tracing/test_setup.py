"""setup_tracing(): environment-driven configuration, idempotence, the off switches and
sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan

from nvrx_otel.semconv import SPAN_CKPT_REQUEST, SPAN_FTL_CYCLE
from nvrx_otel.tracing import (
    NvrxTracerProvider,
    checkpoint_span,
    ft_span,
    inject_env,
    reset_tracing,
    setup_tracing,
)
from nvrx_otel.tracing.sampling import SamplerConfig, sampler_from_env
from tests.tracing.conftest import spans


def test_no_arguments_spool_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    provider = setup_tracing()
    assert isinstance(provider, NvrxTracerProvider) and provider.mode == "spool"
    assert trace.get_tracer_provider() is provider
    with ft_span("cycle", cycle=0):
        pass
    assert [r["name"] for r in spans(tmp_path / "42", "span_end")] == [SPAN_FTL_CYCLE]


def test_same_settings_keep_the_setup_new_ones_reconfigure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path))
    provider = setup_tracing()
    backend = provider.backend  # type: ignore[attr-defined]
    tracer = trace.get_tracer("held.before.reconfiguring")
    assert setup_tracing() is provider and provider.backend is backend  # type: ignore[attr-defined]
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert setup_tracing() is provider and provider.backend is not backend  # type: ignore[attr-defined]
    span = tracer.start_span("not sampled now")  # the old tracer follows the new setup
    span.end()
    assert isinstance(span, NonRecordingSpan) and not spans(tmp_path)


@pytest.mark.parametrize("variable", ["OTEL_SDK_DISABLED", "NVRX_OTEL_DISABLED"])
def test_disabled_installs_nothing_and_helpers_do_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path))
    monkeypatch.setenv(variable, "true")
    provider = setup_tracing()
    assert isinstance(provider, trace.NoOpTracerProvider)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    with checkpoint_span("request", call_idx=1) as span:
        assert span is trace.INVALID_SPAN
    assert not list(tmp_path.rglob("*.jsonl"))


def test_disabling_switches_an_installed_provider_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = setup_tracing(spool_dir=tmp_path)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert setup_tracing(spool_dir=tmp_path) is provider
    assert provider.mode == "off"  # type: ignore[attr-defined]
    with ft_span("run", cycle=1):
        pass
    assert not spans(tmp_path)


def test_exporter_none_keeps_spans_out_of_the_spool_but_ids_propagate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    provider = setup_tracing(spool_dir=tmp_path)
    assert provider.mode == "none"  # type: ignore[attr-defined]
    with ft_span("cycle", cycle=0) as span:
        assert span.get_span_context().is_valid and not span.is_recording()
        child_env = inject_env({})
    assert child_env["TRACEPARENT"].split("-")[2] == f"{span.get_span_context().span_id:016x}"
    assert not spans(tmp_path)


def test_exporter_none_without_spool_exports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    provider = setup_tracing()
    assert provider.mode == "none"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("sampler", "arg", "recorded"),
    [
        ("always_on", None, True),
        ("always_off", None, False),
        ("traceidratio", "0", False),
        ("traceidratio", "1", True),
        ("parentbased_always_off", None, False),
        ("parentbased_traceidratio", "0", False),
    ],
)
def test_sampler_from_the_environment(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sampler: str,
    arg: str | None,
    recorded: bool,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    setup_tracing(spool_dir=tmp_path)
    with checkpoint_span("request", call_idx=1) as span:
        ctx = span.get_span_context()
    assert ctx.is_valid  # sampled or not, the context propagates
    assert span.is_recording() is False  # ended
    assert bool(ctx.trace_flags & 1) is recorded
    assert [r["name"] for r in spans(tmp_path, "span_end")] == ([SPAN_CKPT_REQUEST] * recorded)


def test_parent_based_samplers_follow_a_remote_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    monkeypatch.setenv("TRACEPARENT", f"00-{'ab' * 16}-{'cd' * 8}-01")  # sampled upstream
    setup_tracing(spool_dir=tmp_path)
    with ft_span("run", cycle=0):
        pass
    (end,) = spans(tmp_path, "span_end")
    assert end["trace_id"] == "ab" * 16 and end["parent_id"] == "cd" * 8


def test_unknown_sampler_is_reported_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "sometimes")
    assert sampler_from_env() == SamplerConfig("parentbased_always_on", 1.0)
    assert sampler_from_env() == SamplerConfig("parentbased_always_on", 1.0)
    assert capsys.readouterr().err.count("OTEL_TRACES_SAMPLER='sometimes'") == 1
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "2")
    assert sampler_from_env() == SamplerConfig("traceidratio", 1.0)
    assert "OTEL_TRACES_SAMPLER_ARG='2'" in capsys.readouterr().err


def test_ratio_decisions_match_the_sdk() -> None:
    ours = SamplerConfig("traceidratio", 0.3)
    sdk = TraceIdRatioBased(0.3)
    import random

    rng = random.Random(7)
    for _ in range(2000):
        trace_id = rng.getrandbits(128)
        theirs = sdk.should_sample(None, trace_id, "x").decision.is_sampled()
        assert ours.sample_root(trace_id) is theirs


def test_a_foreign_global_provider_is_kept_and_used_by_helpers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exporter = InMemorySpanExporter()
    theirs = TracerProvider()
    theirs.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(theirs)
    ours = setup_tracing(spool_dir=tmp_path)
    assert isinstance(ours, NvrxTracerProvider) and trace.get_tracer_provider() is theirs
    assert "already installed globally" in capsys.readouterr().err
    with checkpoint_span("request", call_idx=5, path="/ckpt"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.name == SPAN_CKPT_REQUEST and span.attributes == {
        "nv.nvrx.ckpt.call_idx": 5,
        "nv.nvrx.ckpt.path": "/ckpt",
    }
    assert not spans(tmp_path)
    theirs.shutdown()


def test_reset_tracing_allows_a_fresh_start(tmp_path: Path) -> None:
    first = setup_tracing(spool_dir=tmp_path)
    reset_tracing()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    second = setup_tracing(spool_dir=tmp_path)
    assert second is not first and trace.get_tracer_provider() is second
    assert first.mode == "off"  # type: ignore[attr-defined]


def test_an_unusable_spool_falls_back_to_the_exporters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "real"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    provider = setup_tracing(spool_dir=tmp_path / "link")
    assert provider.mode == "sdk"  # type: ignore[attr-defined]
    assert "symlink" in capsys.readouterr().err


def test_tracers_taken_before_setup_follow_it(tmp_path: Path) -> None:
    early = trace.get_tracer("taken.at.import")  # the API's proxy until a provider is set
    setup_tracing(spool_dir=tmp_path)
    with early.start_as_current_span("late") as span:
        assert trace.get_current_span() is span
    assert [r["name"] for r in spans(tmp_path, "span_end")] == ["late"]


def test_unknown_exporter_is_reported_and_nothing_exported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "carrier_pigeon")
    provider = setup_tracing()
    assert provider.mode == "none"  # type: ignore[attr-defined]
    assert "no span exporter named 'carrier_pigeon'" in capsys.readouterr().err
    with ft_span("run", cycle=0) as span:
        assert span.get_span_context().is_valid
