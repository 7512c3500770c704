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
    for f in (ROOT / "model").glob("*.yaml"):
        shutil.copy(f, tmp_path / "model")
    assert _generate.main(["--root", str(tmp_path)]) == 0
    assert _generate.main(["--root", str(tmp_path), "--check"]) == 0
    target = tmp_path / "src/nvrx_otel/semconv.py"
    target.write_text(target.read_text().replace('"nv.nvrx.ckpt.call_idx"', '"x"'))
    assert _generate.main(["--root", str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {id: foo.bar, type: int, brief: b}\n",
            "outside the nv.nvrx. namespace",
        ),
        (
            "groups:\n- id: scope.nv.nvrx.a\n  type: scope\n  name: nv.nvrx.a\n"
            "  constant: A\n  enum: AKind\n  brief: b\n"
            "- id: span.nv.nvrx.a.wrong\n  type: span\n  scope: nv.nvrx.a\n  kind: x\n"
            "  stability: development\n  brief: b\n",
            "id must be 'span.nv.nvrx.a.x'",
        ),
        (
            "groups:\n- id: g\n  type: attribute_group\n  attributes:\n"
            "  - {id: nv.nvrx.a, type: float, brief: b}\n",
            "unknown type 'float'",
        ),
    ],
)
def test_registry_errors_name_the_problem(tmp_path: Path, yaml_text: str, message: str) -> None:
    (tmp_path / "bad.yaml").write_text(yaml_text)
    with pytest.raises(_semconv_model.RegistryError, match=message):
        _semconv_model.load_registry(tmp_path)
