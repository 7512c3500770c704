"""The commands the tools print name the program so that they run as printed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nvrx_otel import command

SCRIPT = Path(sys.executable).with_name("nvrx-otel")


def test_a_script_run_by_its_path_is_named_by_that_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "demo"])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert command.prefix() == [str(SCRIPT)]


def test_the_name_on_path_is_used_when_it_is_this_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "demo"])
    monkeypatch.setenv("PATH", str(SCRIPT.parent))
    assert command.prefix() == ["nvrx-otel"]


def test_python_dash_m_without_the_script_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/somewhere/nvrx_otel/__main__.py"])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert command.prefix() == [sys.executable, "-m", "nvrx_otel"]
    assert command.line("logs", "a dir") == f"{sys.executable} -m nvrx_otel logs 'a dir'"
