"""The semantic conventions: seed constants, the span table, and drift from model/."""

from __future__ import annotations

import re
import shutil
from enum import Enum
from pathlib import Path

import pytest

import nvrx_otel.semconv as s
from nvrx_otel import _generate, _semconv_model

ROOT = Path(__file__).resolve().parents[1]


def test_seed_constants_are_exact() -> None:
    assert s.SPAN_GROUP_CKPT == "nv.nvrx.ckpt"
    assert s.SPAN_GROUP_CKPT_PHASES == "nv.nvrx.ckpt.save"
    assert s.SPAN_GROUP_FT == "nv.nvrx.ftl"
    assert s.SPAN_GROUP_STARTUP == "nv.nvrx.ftl.python"
    assert s.CKPT_CALL_IDX == "nv.nvrx.ckpt.call_idx"


EXPECTED_KINDS = {
    "nv.nvrx.ckpt": ["schedule", "request", "finalize"],
    "nv.nvrx.ckpt.save": [
        "stage_wait", "shm_drain", "stage", "preload", "write", "completion_sync",
    ],
    "nv.nvrx.ftl": [
        "cycle_start", "cycle", "await_round", "rendezvous", "health_check", "worker_launch",
        "run_start", "run", "fault", "teardown", "attribution",
    ],
    "nv.nvrx.ftl.python": ["startup", "imports"],
}  # fmt: skip


def test_span_table_has_every_kind_named_group_dot_kind() -> None:
    by_group: dict[str, list[str]] = {}
    for name, spec in s.SPANS.items():
        assert name == spec.name == f"{spec.group}.{spec.kind}"
        by_group.setdefault(spec.group, []).append(spec.kind)
    assert by_group == EXPECTED_KINDS


def test_kind_enums_match_the_table() -> None:
    for group, enum in s.SPAN_KINDS.items():
        assert [m.value for m in enum] == EXPECTED_KINDS[group]
        for member in enum:
            assert s.span_def(group, member).name == f"{group}.{member.value}"


def test_ckpt_spans_require_call_idx() -> None:
    for kind in s.CkptSpanKind:
        assert s.CKPT_CALL_IDX in s.span_def(s.SPAN_GROUP_CKPT, kind).required


def test_span_def_rejects_a_kind_of_another_group() -> None:
    message = "no span kind 'write' in span group 'nv.nvrx.ckpt'"
    with pytest.raises(KeyError, match=re.escape(message)):
        s.span_def(s.SPAN_GROUP_CKPT, "write")


def test_required_attribute_keys_exist_in_namespace() -> None:
    keys = {
        s.WORKLOAD_RANK, s.WORKLOAD_LOCAL_RANK, s.WORKLOAD_WORLD_SIZE, s.INFRA_RANK,
        s.INFRA_LOCAL_RANK, s.NODE_ID, s.JOB_ID, s.JOB_ARRAY_TASK_ID, s.RESTART_CYCLE,
        s.CKPT_CALL_IDX, s.CKPT_ITERATION, s.CKPT_BYTES, s.CKPT_PATH, s.CKPT_STRATEGY,
        s.RECORD_KEY,
    }  # fmt: skip
    assert all(k.startswith("nv.nvrx.") for k in keys)
    assert len(keys) == 15
    assert s.HOST_NAME == "host.name" and s.PROCESS_PID == "process.pid"
    assert s.ERROR_TYPE == "error.type" and s.EXCEPTION_STACKTRACE == "exception.stacktrace"
    assert s.LOG_RECORD_UID == "log.record.uid"
    assert s.SCHEMA_URL.startswith("https://opentelemetry.io/schemas/1.")


def test_enumerations_are_enums() -> None:
    assert issubclass(s.DropReasonValues, Enum)
    assert s.DropReasonValues.BUDGET.value == "budget"


def test_generated_files_match_registry() -> None:
    """Hand edits to semconv.py or docs/semconv.md (or an edited registry) fail here."""
    for path, text in _generate.outputs(ROOT).items():
        assert path.read_text(encoding="utf-8") == text, f"{path} drifted: regenerate it"


def test_drift_is_detected_after_a_hand_edit(tmp_path: Path) -> None:
    for sub in ("model", "src/nvrx_otel", "docs"):
        (tmp_path / sub).mkdir(parents=True)
    for f in (*(ROOT / "model").glob("*.yaml"), ROOT / "model" / "python.toml"):
        shutil.copy(f, tmp_path / "model")
    assert _generate.main(["--root", str(tmp_path)]) == 0
    assert _generate.main(["--root", str(tmp_path), "--check"]) == 0
    target = tmp_path / "src/nvrx_otel/semconv.py"
    target.write_text(target.read_text().replace('"nv.nvrx.ckpt.call_idx"', '"x"'))
    assert _generate.main(["--root", str(tmp_path), "--check"]) == 1


SIDE = (
    'otel_semconv_version = "1.44.0"\n'
    '[[span_group]]\nname = "nv.nvrx.a"\nconstant = "A"\nenum = "AKind"\nbrief = "b"\n'
    '[otel_attributes]\n"error.type" = { type = "string", stability = "stable" }\n'
)
OTEL_REF = (
    "- id: o\n  type: attribute_group\n  brief: b\n  attributes:\n  - {ref: error.type, brief: b}\n"
)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {id: foo.bar, type: int, stability: development, brief: b}\n" + OTEL_REF,
            "outside the nv.nvrx. namespace",
        ),
        (
            "groups:\n- id: span.nv.nvrx.b.x\n  type: span\n  span_kind: internal\n"
            "  stability: development\n  brief: b\n  attributes: []\n" + OTEL_REF,
            "'nv.nvrx.b.x' is in no span group of python.toml",
        ),
        (
            "groups:\n- id: span.nv.nvrx.a.x.y\n  type: span\n  span_kind: internal\n"
            "  stability: development\n  brief: b\n  attributes: []\n" + OTEL_REF,
            "kind 'x.y' of span group 'nv.nvrx.a' is not a name",
        ),
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {id: nv.nvrx.a, type: float, stability: development, brief: b}\n" + OTEL_REF,
            "unknown type 'float'",
        ),
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {id: nv.nvrx.a, type: int, stability: stabel, brief: b}\n" + OTEL_REF,
            "unknown stability 'stabel'",
        ),
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {ref: host.name, brief: b}\n" + OTEL_REF,
            "reference to 'host.name', neither a registry attribute nor one of the OpenTelemetry",
        ),
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {id: nv.nvrx.a, type: int, stability: development, brief: b}\n",
            r"OpenTelemetry attributes never referenced: \['error.type'\]",
        ),
        (
            "groups:\n- id: g\n  type: reused\n  attributes: []\n" + OTEL_REF,
            "unknown type 'reused'",
        ),
        (
            "groups:\n- id: span.nv.nvrx.a.x\n  type: span\n  span_kind: internal\n"
            "  brief: b\n  attributes: []\n" + OTEL_REF,
            "missing 'stability'",
        ),
    ],
)
def test_registry_errors_name_the_problem(tmp_path: Path, yaml_text: str, message: str) -> None:
    (tmp_path / "bad.yaml").write_text(yaml_text)
    (tmp_path / "python.toml").write_text(SIDE)
    with pytest.raises(_semconv_model.RegistryError, match=message):
        _semconv_model.load_registry(tmp_path)


def test_a_span_belongs_to_its_longest_span_group(tmp_path: Path) -> None:
    two_groups = SIDE.replace(
        "[otel_attributes]",
        '[[span_group]]\nname = "nv.nvrx.a.b"\nconstant = "AB"\nenum = "ABKind"\nbrief = "b"\n'
        "[otel_attributes]",
    )
    (tmp_path / "python.toml").write_text(two_groups)
    (tmp_path / "spans.yaml").write_text(
        "groups:\n- id: span.nv.nvrx.a.b.c\n  type: span\n  span_kind: internal\n"
        "  stability: development\n  brief: b\n  attributes: []\n"
        "- id: span.nv.nvrx.a.d\n  type: span\n  span_kind: internal\n"
        "  stability: development\n  brief: b\n  attributes: [{ref: error.type}]\n" + OTEL_REF
    )
    reg = _semconv_model.load_registry(tmp_path)
    assert [(s.scope, s.kind) for s in reg.spans.values()] == [
        ("nv.nvrx.a.b", "c"),
        ("nv.nvrx.a", "d"),
    ]
    assert reg.schema_url == "https://opentelemetry.io/schemas/1.44.0"
