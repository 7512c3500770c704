"""The registry under ``model/`` against OpenTelemetry's rules: Weaver's JSON schema for
semantic-convention files, unknown fields, and the true stability of referenced keys."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from nvrx_otel import _semconv_model
from tests.semconv_check import otel_semconv_ids, otel_stable_ids

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "model"
SCHEMA = json.loads((MODEL / "schema" / "semconv.schema.json").read_text(encoding="utf-8"))
FILES = sorted(MODEL.glob("*.yaml"))


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Weaver's schema, refusing what it does not name (Weaver's parser refuses unknown
    fields; the published schema leaves groups and attributes open).

    ``deprecated`` is added to attributes: Weaver's attribute model has it (OpenTelemetry's
    own registry marks renamed attributes with it) but the JSON schema does not list it."""
    out = copy.deepcopy(schema)
    out["properties"]["groups"]["items"]["unevaluatedProperties"] = False
    attribute = out["$defs"]["Attribute"]
    attribute["allOf"][0]["properties"]["deprecated"] = {"$ref": "#/$defs/Deprecated"}
    attribute["unevaluatedProperties"] = False
    return out


def errors(schema: dict[str, Any], doc: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        for e in validator.iter_errors(doc)
    ]


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator.check_schema(strict_schema(SCHEMA))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_model_files_are_valid_against_weavers_schema(path: Path) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert errors(SCHEMA, doc) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_model_files_use_no_field_weaver_does_not_know(path: Path) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert errors(strict_schema(SCHEMA), doc) == []


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ({"id": "r", "type": "reused", "brief": "b", "attributes": []}, "'reused' is not one"),
        (  # a span group without stability
            {"id": "span.x", "type": "span", "span_kind": "internal", "brief": "b",
             "attributes": []},
            "'stability' is a required property",
        ),
        (  # an enum member without stability
            {"id": "g", "type": "attribute_group", "brief": "b", "attributes": [
                {"id": "a", "type": {"members": [{"id": "m", "value": "m"}]},
                 "stability": "development", "brief": "b"}]},
            "'stability' is a required property",
        ),
    ],
)  # fmt: skip
def test_the_schema_refuses_what_the_old_registry_did(group: dict[str, Any], expected: str) -> None:
    def messages(error: jsonschema.ValidationError) -> list[str]:
        return [error.message] + [m for c in error.context or () for m in messages(c)]

    found = [
        m
        for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors({"groups": [group]})
        for m in messages(e)
    ]
    assert any(expected in m for m in found), found


@pytest.mark.parametrize(
    "group",
    [
        {"id": "s", "type": "span", "span_kind": "internal", "stability": "development",
         "brief": "b", "attributes": [], "kind": "write"},
        {"id": "g", "type": "attribute_group", "brief": "b", "attributes": [
            {"id": "a", "type": "int", "stability": "development", "brief": "b",
             "constant": "A"}]},
    ],
)  # fmt: skip
def test_the_strict_schema_refuses_unknown_fields(group: dict[str, Any]) -> None:
    assert errors(SCHEMA, {"groups": [group]}) == []  # the published schema lets them pass
    assert errors(strict_schema(SCHEMA), {"groups": [group]}) != []


def test_the_schema_and_its_notice_are_the_ones_copied_from_weaver() -> None:
    assert SCHEMA["$id"] == "https://opentelemetry.io/schemas/v1/semconv.schema.json"
    notice = (MODEL / "schema" / "NOTICE").read_text(encoding="utf-8")
    assert "open-telemetry/weaver" in notice and "Apache License, Version 2.0" in notice


# --- the referenced OpenTelemetry attributes --------------------------------------------------


def test_referenced_attributes_are_opentelemetrys_with_their_true_stability() -> None:
    from opentelemetry.semconv.schemas import Schemas

    reg = _semconv_model.load_registry(MODEL)
    referenced = {a.id: a.stability for a in reg.attributes.values() if a.reused}
    assert set(referenced) <= otel_semconv_ids()
    # Judged against the installed conventions whatever release they are: a stability that
    # changed upstream fails here, and model/ (and its schema_url) follows it.
    latest = max(Schemas, key=lambda s: tuple(map(int, s.value.rsplit("/", 1)[1].split("."))))
    assert latest.value == reg.schema_url, "model/python.toml names another conventions release"
    stable = otel_stable_ids()
    truth = {k: "stable" if k in stable else "development" for k in referenced}
    assert referenced == truth
    for key in ("host.name", "process.pid", "thread.id", "thread.name", "log.record.uid"):
        assert referenced[key] == "development"


def test_log_logger_name_is_no_opentelemetry_attribute_and_not_declared() -> None:
    reg = _semconv_model.load_registry(MODEL)
    assert "log.logger.name" not in otel_semconv_ids()
    assert "log.logger.name" not in reg.attributes


def test_registry_attributes_stay_in_their_namespace() -> None:
    reg = _semconv_model.load_registry(MODEL)
    for attr in reg.attributes.values():
        assert attr.reused != attr.id.startswith(_semconv_model.NAMESPACE), attr.id
