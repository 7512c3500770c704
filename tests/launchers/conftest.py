"""Real launchers (Slurm, Open MPI, MPICH), installed from Debian packages by
``scripts/install-test-packages.sh`` (``scripts/test`` runs it). A launcher that is missing
fails its tests with the command's name: it is never skipped."""

from __future__ import annotations

import shutil

import pytest


def need(command: str) -> str:
    """The path of ``command``; fails the test when it is not installed."""
    path = shutil.which(command)
    if path is None:
        pytest.fail(f"{command} is not installed: run scripts/install-test-packages.sh (as root)")
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/launchers/" in item.nodeid:
            item.add_marker(pytest.mark.launchers)
