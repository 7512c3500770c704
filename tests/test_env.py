"""Environment parsing: bad values name the variable and the value; lenient mode warns once."""

from __future__ import annotations

import pytest

from nvrx_otel import env


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
