"""Environment parsing: bad values name the variable and the value; lenient mode warns once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvrx_otel import _generate, env


@pytest.mark.parametrize("text", ["1", "true", "YES", "on", " On "])
def test_flag_true(text: str) -> None:
    assert env.parse_flag("X", text) is True


@pytest.mark.parametrize("text", ["0", "false", "no", "off", ""])
def test_flag_false(text: str) -> None:
    assert env.parse_flag("X", text) is False


def test_flag_garbage_names_variable_and_value() -> None:
    with pytest.raises(ValueError, match=r"NVRX_LOG_DEBUG='maybe'"):
        env.parse_flag(env.NVRX_LOG_DEBUG, "maybe")


@pytest.mark.parametrize("text", ["abc", "-1", "1.5", "0x10"])
def test_nonneg_int_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=rf"RANK={text!r}: expected a whole number >= 0"):
        env.parse_nonneg_int("RANK", text)


def test_read_strict_raises_and_lenient_warns_once(capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"NVRX_LOG_MAX_LOG_FILES": "many"}
    with pytest.raises(ValueError, match="NVRX_LOG_MAX_LOG_FILES='many'"):
        env.read("NVRX_LOG_MAX_LOG_FILES", env.parse_positive_int, 4, environ=environ, strict=True)
    for _ in range(3):
        got = env.read("NVRX_LOG_MAX_LOG_FILES", env.parse_positive_int, 4, environ=environ)
        assert got == 4
    err = capsys.readouterr().err
    assert err.count("NVRX_LOG_MAX_LOG_FILES='many'") == 1
    assert "using the default" in err


def test_read_unset_and_empty_give_default() -> None:
    assert env.read("A", env.parse_nonneg_int, 7, environ={}) == 7
    assert env.read("A", env.parse_nonneg_int, 7, environ={"A": "  "}) == 7
    assert env.read("A", env.parse_nonneg_int, 7, environ={"A": "12"}) == 12


def test_every_name_constant_equals_its_value() -> None:
    names = {k: v for k, v in vars(env).items() if k.isupper() and isinstance(v, str)}
    assert len(names) > 30
    for key, value in names.items():
        assert key == value


# --- the settings table -----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nvrx_otel"
_BAD_CANDIDATES = ("maybe", "-1", "1.5x", "\x01", "a\x00b")


def test_every_setting_is_in_the_settings_doc_with_its_default() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert doc == _generate.settings_markdown(), "run `python -m nvrx_otel._generate`"
    rows = {line.split("|")[1].strip(" `"): line for line in doc.splitlines() if "| `" in line}
    assert len(env.SETTINGS) > 60
    for name, setting in env.SETTINGS.items():
        assert name in rows, f"{name} is not in docs/settings.md"
        assert f"| {_generate.default_text(setting)} |" in rows[name]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/settings.md" in readme


@pytest.mark.parametrize(
    "name", sorted(n for n, s in env.SETTINGS.items() if s.parse is not env.parse_any)
)
def test_every_setting_parser_rejects_a_bad_value_naming_the_variable(name: str) -> None:
    setting = env.SETTINGS[name]
    rejected = []
    for bad in _BAD_CANDIDATES:
        try:
            setting.parse(name, bad)
        except ValueError as exc:
            assert f"{name}={bad!r}" in str(exc)
            rejected.append(bad)
    assert rejected, f"{name}: no bad value rejected"
    with pytest.raises(ValueError, match=name):
        setting.get({name: rejected[0]}, strict=True)


def test_every_setting_default_is_what_its_row_says() -> None:
    for name, setting in env.SETTINGS.items():
        assert setting.get({}) == setting.default
        assert env.read(name, setting.parse, setting.default, environ={}) == setting.default


def test_spool_resolvers_follow_the_table() -> None:
    assert env.spool_root(None, {}) is None
    assert env.spool_root(None, {env.NVRX_NODE_LOCAL_TMPDIR: " /x "}) == "/x"
    assert env.spool_root("/arg", {env.NVRX_NODE_LOCAL_TMPDIR: "/x"}) == "/arg"
    assert env.spool_file_size(None, {}) == env.SPOOL_FILE_SIZE_KB.default * 1024
    assert env.spool_file_size(3, {env.NVRX_LOG_MAX_FILE_SIZE_KB: "7"}) == 3 * 1024
    scale = env.SPOOL_SCALE.default
    default_files = env.SPOOL_FILES.default * env.SPOOL_FILE_SIZE_KB.default * 1024
    assert env.spool_budget({}) == default_files * scale
    small = {env.NVRX_LOG_MAX_FILE_SIZE_KB: "10", env.NVRX_LOG_MAX_LOG_FILES: "50"}
    assert env.spool_budget(small) == 50 * 10 * 1024 * scale
    assert env.spool_budget({**small, env.NVRX_OTEL_SPOOL_SCALE: "1"}) == 50 * 10 * 1024
    assert env.max_record_bytes({}) == env.MAX_RECORD_KB.default * 1024
    assert env.max_record_bytes({env.NVRX_OTEL_MAX_RECORD_KB: "99999"}) == (
        env.MAX_RECORD_KB_LIMIT * 1024
    )
    assert env.spool_budget({**small, env.NVRX_OTEL_SPOOL_BUDGET_MB: "1.5"}) == 3 << 19


def _src_files() -> list[Path]:
    table = {SRC / "env.py", SRC / "envexternal.py"}  # the settings table's rows
    return [p for p in sorted(SRC.rglob("*.py")) if p not in table]


def test_no_setting_name_or_default_is_written_outside_env() -> None:
    """Code names a setting by its ``env`` constant and gets its value from its row or a
    resolver: no variable name as a string literal, no default value of the spool sizes,
    and no direct environment read of a setting that has a default or is resolved."""
    resolved = {env.NVRX_NODE_LOCAL_TMPDIR, env.NVRX_OTEL_SPOOL_BUDGET_MB}
    with_default = {n for n, s in env.SETTINGS.items() if s.default is not None} | resolved
    big_defaults = {
        str(s.default)
        for s in env.SETTINGS.values()
        if isinstance(s.default, int) and not isinstance(s.default, bool) and s.default >= 100
    } - {"1024"}  # NVRX_OTEL_MAX_RECORD_KB's default is also the bytes in a KiB everywhere
    assert "10240" in big_defaults
    read = re.compile(r"(?:environ(?:\.get)?\(|environ\[|getenv\(|env\.read\()\s*env\.(\w+)")
    found = []
    for path in _src_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for name in env.SETTINGS:
            if f'"{name}"' in text or f"'{name}'" in text:
                found.append(f"{where}: the name {name} as a string")
        for value in big_defaults:
            if re.search(rf"(?<![\w.]){value}(?![\w.])", text):
                found.append(f"{where}: the default {value}")
        for m in read.finditer(text):
            if m.group(1) in with_default:
                found.append(f"{where}: reads {m.group(1)} past its row")
    assert found == []
