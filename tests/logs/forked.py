"""A check both logging front ends share: a forked child logs with its own writer."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from nvrx_otel import record as rec
from tests.conftest import log_records


def check_child_writes_its_own_keys(log: logging.Logger, directory: Path) -> None:
    """Log in the parent, in a forked child, in the parent again: the child's records
    carry its pid and a writer id of its own counting from 0; the parent keeps its id."""
    log.info("parent before")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            log.info("child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    log.info("parent after")
    by_msg = {r["msg"]: r for r in log_records(directory)}
    child, parent = by_msg["child"], by_msg["parent before"]
    assert child["pid"] == pid and parent["pid"] == os.getpid()
    assert child["key"].split("-")[0] != parent["key"].split("-")[0]
    assert rec.seq_of(child["key"]) == 0  # the child's writer counts from 0
    assert by_msg["parent after"]["key"].split("-")[0] == parent["key"].split("-")[0]
