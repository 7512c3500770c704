"""``get_active_config()``: each resolved setting and the layer it came from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from nvrx_otel.activeconfig import ActiveSetting, get_active_config
from nvrx_otel.logging import setup_logger
from nvrx_otel.tracing import reset_tracing, setup_tracing


@pytest.fixture
def no_tracing() -> Iterator[None]:
    reset_tracing()
    yield
    reset_tracing()


def _one(section: str, name: str, **kw: object) -> ActiveSetting:
    found = get_active_config(**kw).get(section, name)  # type: ignore[arg-type]
    assert found is not None, (section, name)
    return found


def test_default_when_nothing_is_set() -> None:
    root = _one("spool", "root", environ={})
    assert (root.value, root.source) == (None, "default")
    assert _one("logging", "records go to", environ={}).value == "stderr"
    budget = _one("spool", "budget bytes", environ={})
    assert budget.value == 4 * 10240 * 1024 * 4
    assert "NVRX_OTEL_SPOOL_SCALE" in budget.source


def test_environment_variable_beats_default(tmp_path: Path) -> None:
    e = {"NVRX_NODE_LOCAL_TMPDIR": str(tmp_path), "NVRX_OTEL_SPOOL_BUDGET_MB": "2"}
    root = _one("spool", "root", environ=e)
    assert (root.value, root.source) == (
        str(tmp_path),
        "environment variable NVRX_NODE_LOCAL_TMPDIR",
    )
    budget = _one("spool", "budget bytes", environ=e)
    assert (budget.value, budget.source) == (
        2 << 20,
        "environment variable NVRX_OTEL_SPOOL_BUDGET_MB",
    )
    assert _one("tracing", "spans go to", environ=e).value == "spool"


def test_argument_beats_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_tracing: None
) -> None:
    """What this process's setup_logger / setup_tracing calls were given wins, as there."""
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "env"))
    setup_logger(node_local_tmp_dir=str(tmp_path / "arg"))
    setup_tracing(spool_dir=tmp_path / "targ")
    root = _one("spool", "root")
    assert root.value == str(tmp_path / "arg")
    assert root.source == "argument node_local_tmp_dir of setup_logger()"
    traced = _one("tracing", "spool root")
    assert (traced.value, traced.source) == (
        str(tmp_path / "targ"),
        "argument spool_dir of setup_tracing()",
    )
    cli = _one("spool", "root", spool_dir="/elsewhere")
    assert (cli.value, cli.source) == ("/elsewhere", "argument --spool-dir")


def test_malformed_value_reports_the_problem_and_the_default_used() -> None:
    config = get_active_config({"NVRX_LOG_DEBUG": "maybe", "NVRX_LOG_MAX_LOG_FILES": "0"})
    level = config.get("logging", "level")
    assert level is not None and (level.value, level.source) == ("INFO", "default")
    assert "NVRX_LOG_DEBUG='maybe'" in level.problem
    assert len(config.problems) == 2  # each once, though shown in two sections
    assert any("NVRX_LOG_MAX_LOG_FILES='0'" in p for p in config.problems)


def test_logflow_sources_file_environment_parent(tmp_path: Path) -> None:
    (tmp_path / "logflow.yaml").write_text("retention: 9\nconsole_level: WARNING\n")
    parent = orjson.dumps({"pid": 1, "file_level": "ERROR"}).decode()
    e = {
        "LOGFLOW_CONSOLE_LEVEL": "ERROR",
        "NVRX_OTEL_LOGFLOW_PARENT": parent,
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }
    config = get_active_config(e, cwd=tmp_path)
    retention = config.get("logflow", "retention")
    assert retention is not None and retention.value == 9
    assert retention.source == str(tmp_path / "logflow.yaml")
    console = config.get("logflow", "console_level")
    assert console is not None
    assert console.source == "environment variable LOGFLOW_CONSOLE_LEVEL"
    file_level = config.get("logflow", "file_level")
    assert file_level is not None and file_level.value == "ERROR"
    assert file_level.source.startswith("the parent process's settings")
    log_dir = config.get("logflow", "log_dir")
    assert log_dir is not None and log_dir.source == "default"


def test_otlp_endpoint_sources_and_header_values_never_shown() -> None:
    e = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://gw:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://tr:4318/v1/traces",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20secret",
    }
    config = get_active_config(e)
    logs = config.get("otlp", "logs endpoint")
    traces = config.get("otlp", "traces endpoint")
    assert logs is not None and traces is not None
    assert (logs.value, logs.source) == (
        "http://gw:4318/v1/logs",
        "environment variable OTEL_EXPORTER_OTLP_ENDPOINT",
    )
    assert traces.source == "environment variable OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    assert "secret" not in orjson.dumps(config.as_dict()).decode()
    flag = get_active_config(e, otlp_endpoint="http://cli:4318").get("otlp", "logs endpoint")
    assert flag is not None and flag.source == "argument --otlp-endpoint"


def test_kill_switch_shows_where_everything_goes() -> None:
    config = get_active_config({"NVRX_OTEL_DISABLED": "1", "NVRX_NODE_LOCAL_TMPDIR": "/x"})
    spans = config.get("tracing", "spans go to")
    assert spans is not None and spans.value == "off"
    assert spans.source == "environment variable NVRX_OTEL_DISABLED"
    went = config.get("logging", "records go to")
    assert went is not None and went.value == "stderr (NVRX_OTEL_DISABLED: no spool)"


def test_as_dict_is_json() -> None:
    doc = get_active_config({}).as_dict()
    orjson.dumps(doc)
    assert set(doc) >= {"logging", "spool", "tracing", "otlp", "logflow", "other"}
