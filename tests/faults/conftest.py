"""Prints the fault ledger (one row per scenario run) at the end of the pytest run."""

from __future__ import annotations

import pytest

from tests.faults.ledger import ROWS, table


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    terminalreporter.section("fault ledger")
    for line in table(ROWS):
        terminalreporter.write_line(line)
