"""The settings table and its resolver: precedence, falsy values, and error messages that
name the key, the value and where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx_otel.logging.logflow import configure_logging
from nvrx_otel.logging.logflow.levels import Rule
from nvrx_otel.logging.logflow.settings import TABLE, resolve

LAYERS = ["argument", "env", "logflow.yaml", "logflow.yml", "pyproject", "xdg", "default"]
VALUES = {
    "argument": "CRITICAL",
    "env": "ERROR",
    "logflow.yaml": "WARNING",
    "logflow.yml": "SUCCESS",
    "pyproject": "DEBUG",
    "xdg": "TRACE",
    "default": "INFO",
}


def _write_layer(tmp: Path, layer: str, body: str) -> None:
    if layer in ("logflow.yaml", "logflow.yml"):
        (tmp / layer).write_text(body + "\n")
    elif layer == "pyproject":
        key, _, value = body.partition(": ")
        (tmp / "pyproject.toml").write_text(f"[tool.logflow]\n{key} = {value}\n")
    elif layer == "xdg":
        (tmp / "xdg" / "logflow").mkdir(parents=True, exist_ok=True)
        (tmp / "xdg" / "logflow" / "config.yaml").write_text(body + "\n")


def _env(tmp: Path, **values: str) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp / "xdg"), **values}


@pytest.mark.parametrize("top", LAYERS)
def test_precedence_arguments_env_yaml_yml_pyproject_xdg_defaults(tmp_path: Path, top: str) -> None:
    """Every layer from ``top`` down sets console_level; the value of ``top`` wins."""
    present = LAYERS[LAYERS.index(top) :]
    environ = _env(tmp_path)
    arguments: dict[str, object] = {}
    for layer in present:
        value = VALUES[layer]
        if layer == "argument":
            arguments["console_level"] = value
        elif layer == "env":
            environ["LOGFLOW_CONSOLE_LEVEL"] = value
        elif layer != "default":
            _write_layer(tmp_path, layer, f'console_level: "{value}"')
    settings = resolve(arguments, cwd=tmp_path, environ=environ)
    assert settings.console_level == VALUES[top]
    assert settings.sources["console_level"] != ""


def test_layers_combine_per_setting(tmp_path: Path) -> None:
    """Each setting comes from the highest layer that sets it (LogFlow reads one file only)."""
    _write_layer(tmp_path, "logflow.yaml", "file_level: TRACE")
    _write_layer(tmp_path, "xdg", "retention: 9")
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path, LOGFLOW_DIR="/somewhere"))
    assert (s.file_level, s.retention, s.log_dir) == ("TRACE", 9, "/somewhere")
    assert s.sources["retention"] == str(tmp_path / "xdg" / "logflow" / "config.yaml")
    assert s.sources["log_dir"] == "environment variable LOGFLOW_DIR"


def test_xdg_default_is_home_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = tmp_path / "home" / ".config" / "logflow"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text("retention: 2\n")
    assert resolve({}, cwd=tmp_path, environ={}).retention == 2


def test_defaults(tmp_path: Path) -> None:
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path))
    assert (s.log_dir, s.script_name, s.file_level, s.console_level) == (
        "./logs",
        None,
        "DEBUG",
        "INFO",
    )
    assert (s.rotation_on_startup, s.retention, s.enqueue, s.diagnose) == (True, 5, False, False)
    assert s.module_levels == ()
    assert {t.key for t in TABLE} >= {"log_dir", "module_levels", "eager_enqueue"}


# --- falsy values are honoured --------------------------------------------------------------


def test_false_rotation_and_zero_retention_from_files_win_over_lower_layers(tmp_path: Path) -> None:
    _write_layer(tmp_path, "logflow.yaml", "rotation_on_startup: false\nretention: 0")
    _write_layer(tmp_path, "xdg", "rotation_on_startup: true\nretention: 7")
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path))
    assert s.rotation_on_startup is False and s.retention == 0


def test_falsy_arguments_and_env_win(tmp_path: Path) -> None:
    _write_layer(tmp_path, "logflow.yaml", "enqueue: true\nretention: 3")
    s = resolve(
        {"rotation_on_startup": False, "retention": 0},
        cwd=tmp_path,
        environ=_env(tmp_path, LOGFLOW_ENQUEUE="0"),
    )
    assert (s.rotation_on_startup, s.retention, s.enqueue) == (False, 0, False)


def test_pyproject_zero_retention(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.logflow]\nretention = 0\nenqueue = false\n")
    _write_layer(tmp_path, "xdg", "retention: 4\nenqueue: true")
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path))
    assert (s.retention, s.enqueue) == (0, False)


def test_null_in_a_file_means_not_set(tmp_path: Path) -> None:
    _write_layer(tmp_path, "logflow.yaml", "retention: null")
    _write_layer(tmp_path, "xdg", "retention: 3")
    assert resolve({}, cwd=tmp_path, environ=_env(tmp_path)).retention == 3


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("1", True), ("t", True), ("Y", True), ("yes", True),
     ("false", False), ("0", False), ("f", False), ("n", False), ("NO", False)],
)  # fmt: skip
def test_boolean_text(tmp_path: Path, text: str, value: bool) -> None:
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path, LOGFLOW_ENQUEUE=text))
    assert s.enqueue is value


@pytest.mark.parametrize("name", ["LOGFLOW_ROTATION_ON_STARTUP", "LOGFLOW_STARTUP_ROTATION"])
def test_both_spellings_of_startup_rotation(tmp_path: Path, name: str) -> None:
    _write_layer(tmp_path, "logflow.yaml", "rotation_on_startup: true")
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path, **{name: "false"}))
    assert s.rotation_on_startup is False
    assert s.sources["rotation_on_startup"] == f"environment variable {name}"


def test_both_spellings_agreeing_is_fine_conflicting_is_an_error(tmp_path: Path) -> None:
    both = {"LOGFLOW_ROTATION_ON_STARTUP": "no", "LOGFLOW_STARTUP_ROTATION": "0"}
    assert resolve({}, cwd=tmp_path, environ=_env(tmp_path, **both)).rotation_on_startup is False
    both["LOGFLOW_STARTUP_ROTATION"] = "yes"
    with pytest.raises(
        ValueError, match="LOGFLOW_ROTATION_ON_STARTUP='no'.*LOGFLOW_STARTUP_ROTATION='yes'"
    ):
        resolve({}, cwd=tmp_path, environ=_env(tmp_path, **both))


def test_levels_any_case_or_number(tmp_path: Path) -> None:
    s = resolve(
        {"console_level": "warning"}, cwd=tmp_path, environ=_env(tmp_path, LOGFLOW_FILE_LEVEL="15")
    )
    assert (s.console_level, s.file_level) == ("WARNING", 15)


# --- errors name the key, the value and the source ----------------------------------------


def test_unknown_key_in_a_file(tmp_path: Path) -> None:
    _write_layer(tmp_path, "logflow.yaml", "colour: true")
    with pytest.raises(ValueError) as err:
        resolve({}, cwd=tmp_path, environ=_env(tmp_path))
    text = str(err.value)
    assert "unknown logflow setting 'colour'" in text and "True" in text
    assert str(tmp_path / "logflow.yaml") in text


def test_unknown_key_in_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.logflow]\nlogdir = "x"\n')
    with pytest.raises(
        ValueError, match=r"'logdir' \(value 'x'\) in .*pyproject.toml \[tool.logflow\]"
    ):
        resolve({}, cwd=tmp_path, environ=_env(tmp_path))


def test_invalid_value_in_a_file(tmp_path: Path) -> None:
    _write_layer(tmp_path, "logflow.yml", "retention: -1")
    with pytest.raises(ValueError) as err:
        resolve({}, cwd=tmp_path, environ=_env(tmp_path))
    assert str(err.value) == (
        f"logflow setting retention=-1 in {tmp_path / 'logflow.yml'}: expected a whole number >= 0"
    )


def test_invalid_value_in_a_lower_layer_is_reported_even_when_overridden(tmp_path: Path) -> None:
    _write_layer(tmp_path, "xdg", "file_level: LOUD")
    with pytest.raises(ValueError, match=r"file_level='LOUD' in .*xdg/logflow/config.yaml"):
        resolve({"file_level": "INFO"}, cwd=tmp_path, environ=_env(tmp_path))


def test_invalid_env_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="retention='many' in environment variable LOGFLOW_RETENTION"
    ):
        resolve({}, cwd=tmp_path, environ=_env(tmp_path, LOGFLOW_RETENTION="many"))


def test_invalid_argument_raises_at_configure_time(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"enqueue='sometimes' in configure_logging\(\) argument"):
        configure_logging(enqueue="sometimes")  # type: ignore[arg-type]
    assert not (tmp_path / "logs").exists()  # nothing was set up


@pytest.mark.parametrize(
    ("yaml", "match"),
    [
        ("module_levels:\n  pkg:\n    file: DEBUG\n    colour: red",
         r"module_levels\['pkg'\].colour='red' in .*logflow.yaml: expected only console, file"),
        ("module_levels:\n  pkg:\n    workers_only: true",
         r"module_levels\['pkg'\]=\{'workers_only': True\} .*: expected at least one of console"),
        ("module_levels:\n  pkg:\n    file: LOUD",
         r"module_levels\['pkg'\].file='LOUD' in .*: expected a loguru level"),
        ("module_levels:\n  pkg:\n    file: INFO\n    workers_only: 'yes'",
         r"module_levels\['pkg'\].workers_only='yes' .*: expected true or false"),
        ("module_levels:\n  pkg..sub:\n    file: INFO",
         r"module_levels\['pkg..sub'\]='pkg..sub' .*no empty segment"),
        ("module_levels: [pkg]", r"module_levels=\['pkg'\] .*: expected a mapping"),
    ],
)  # fmt: skip
def test_module_levels_errors(tmp_path: Path, yaml: str, match: str) -> None:
    _write_layer(tmp_path, "logflow.yaml", yaml)
    with pytest.raises(ValueError, match=match):
        resolve({}, cwd=tmp_path, environ=_env(tmp_path))


def test_module_levels_parsed(tmp_path: Path) -> None:
    _write_layer(
        tmp_path,
        "logflow.yaml",
        "module_levels:\n  a.b:\n    console: error\n  c:\n    file: 5\n    workers_only: true",
    )
    s = resolve({}, cwd=tmp_path, environ=_env(tmp_path))
    assert s.module_levels == (Rule("a.b", console="ERROR"), Rule("c", file=5, workers_only=True))


def test_broken_yaml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "logflow.yaml").write_text("log_dir: [unclosed\n")
    with pytest.raises(ValueError, match=r"logflow.yaml is not valid YAML"):
        resolve({}, cwd=tmp_path, environ=_env(tmp_path))


def test_yaml_that_is_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "logflow.yaml").write_text("- a\n- b\n")
    with pytest.raises(ValueError, match=r"logflow.yaml: expected a mapping of settings, got list"):
        resolve({}, cwd=tmp_path, environ=_env(tmp_path))


def test_broken_pyproject_is_skipped_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.logflow\nretention = 1\n")
    assert resolve({}, cwd=tmp_path, environ=_env(tmp_path)).retention == 5
    assert "cannot parse" in capsys.readouterr().err


def test_unknown_argument_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="colour"):
        resolve({"colour": True}, cwd=tmp_path, environ=_env(tmp_path))


def test_a_child_takes_its_parents_settings_below_its_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    import orjson

    exported = {"pid": os.getpid() + 100_000, "log_dir": "/parent/logs", "script_name": "job",
                "retention": 0, "module_levels": {"a": {"file": "ERROR"}}}  # fmt: skip
    environ = _env(
        tmp_path,
        NVRX_OTEL_LOGFLOW_PARENT=orjson.dumps(exported).decode(),
        LOGFLOW_SCRIPT_NAME="from-env",
    )
    s = resolve({"retention": 2}, cwd=tmp_path, environ=environ)
    assert (s.log_dir, s.script_name, s.retention) == ("/parent/logs", "job", 2)
    assert s.module_levels == (Rule("a", file="ERROR"),) and s.inherited
    exported["pid"] = os.getpid()  # the process that exported it: not a child
    environ["NVRX_OTEL_LOGFLOW_PARENT"] = orjson.dumps(exported).decode()
    s = resolve({}, cwd=tmp_path, environ=environ)
    assert s.script_name == "from-env" and not s.inherited
    environ["NVRX_OTEL_LOGFLOW_PARENT"] = "{not json"
    assert resolve({}, cwd=tmp_path, environ=environ).script_name == "from-env"
    assert "NVRX_OTEL_LOGFLOW_PARENT is malformed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "size"),
    [("100 MB", 100_000_000), ("100 MiB", 100 * 2**20), ("512 KB", 512_000), ("512 KiB", 524_288),
     ("2 GB", 2_000_000_000), ("1.5 GiB", 3 * 2**29), ("4096", 4096), ("10 B", 10)],
)  # fmt: skip
def test_sizes_read_as_loguru_reads_them(text: str, size: int) -> None:
    assert resolve({"rotation_size": text}).rotation_size == size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1 week", 604_800.0), ("2 weeks", 1_209_600.0), ("1 h 30 min", 5400.0), ("90", 90.0),
     ("15 min", 900.0), ("1 d", 86_400.0)],
)  # fmt: skip
def test_durations_read_as_loguru_reads_them(text: str, seconds: float) -> None:
    assert resolve({"rotation_interval": text}).rotation_interval == seconds


def test_a_malformed_nvrx_otel_loguru_variable_never_stops_a_rank(
    capfd: pytest.CaptureFixture[str],
) -> None:
    bad = {"NVRX_OTEL_LOGURU_ROTATION_SIZE": "100 MX", "NVRX_OTEL_LOGURU_RELOAD_SIGNAL": "SIGUSR1"}
    settings = resolve({}, environ=bad)
    assert settings.rotation_size is None and settings.reload_signal is None
    assert settings.sources["rotation_size"] == "default"
    err = capfd.readouterr().err
    assert "NVRX_OTEL_LOGURU_ROTATION_SIZE" in err and "NVRX_OTEL_LOGURU_RELOAD_SIGNAL" in err
    with pytest.raises(ValueError, match="NVRX_OTEL_LOGURU_ROTATION_SIZE"):
        resolve({}, environ=bad, strict_env=True)  # what the doctor shows as a problem
    with pytest.raises(ValueError, match="rotation_size"):  # arguments still raise
        resolve({"rotation_size": "100 MX"})
