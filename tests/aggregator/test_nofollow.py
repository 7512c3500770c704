"""The aggregator's output files are opened without following a symlink.

``nobody`` plants a symlink under the name of an output file in a shared directory (here
a /tmp-like 1777 one) pointing at a file it wants the aggregator (root) to append to: the
``--otlp-json`` files and the node log refuse it with one clear line, and the target is
left as it was."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nvrx_otel.aggregator.lifecycle import AggregatorError
from nvrx_otel.aggregator.otlp_delivery import JsonLines
from nvrx_otel.aggregator.otlp_encode import encode_logs
from nvrx_otel.aggregator.otlp_transport import Result
from nvrx_otel.aggregator.service import Aggregator
from tests.aggregator.spoolkit import NO_WATCHER, NODE, config, finish, spawn
from tests.conftest import as_nobody

_RECORD = {"v": 1, "k": "log", "ts": 1_700_000_000_000_000_000, "sev": 9, "lvl": "INFO",
           "lg": "t", "msg": "hello", "key": "k-0"}  # fmt: skip


SHARED = pytest.mark.parametrize("mode", [0o1777, 0o777], ids=["sticky", "open"])
"""A directory anyone may make names in: like /tmp (where Linux itself refuses to follow
another user's symlink, protected_symlinks), and without the sticky bit."""


def _shared(shared_tmp: Path, name: str, mode: int = 0o1777) -> Path:
    directory = shared_tmp / name
    directory.mkdir()
    directory.chmod(mode)
    return directory


def _plant(directory: Path, name: str) -> Path:
    """``nobody`` makes a file of its own and a symlink ``name`` to it; the target."""
    target = directory / "victim"
    as_nobody("sh", "-c", f"printf 'untouched\\n' > {target}")
    as_nobody("ln", "-s", str(target), str(directory / name))
    return target


def test_otlp_json_symlink_planted_before_start_is_refused(shared_tmp: Path) -> None:
    """At start: the CLI exits 1 with one line naming the file; nothing is appended."""
    out = _shared(shared_tmp, "json")
    target = _plant(out, f"logs_{NODE}.jsonl")
    argv = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
            str(shared_tmp / "logs"), "--otlp-json", str(out), "--job-id", "job1",
            "--wait-file", str(shared_tmp / "done")]  # fmt: skip
    env = {"NVRX_OTEL_NODE_ID": NODE, "NVRX_NODE_LOCAL_TMPDIR": str(shared_tmp / "spool")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX", "RANK"))}
    base.update(NO_WATCHER)
    code, err = finish(spawn(shared_tmp, argv, {**base, **env}))
    assert code == 1
    said = [line for line in err.splitlines() if "symlink" in line]
    assert len(said) == 1 and f"logs_{NODE}.jsonl is a symlink" in said[0], err
    assert "Traceback" not in err
    assert target.read_text() == "untouched\n"


@SHARED
def test_otlp_json_symlink_planted_after_start_is_not_followed(shared_tmp: Path, mode: int) -> None:
    """While running: the request is retried (the records stay in the spool), the error
    says why, and the target is left as it was."""
    out = _shared(shared_tmp, "json", mode)
    sink = JsonLines(out, NODE)
    message = encode_logs([({}, [_RECORD])], 0)
    assert sink.deliver("logs", message, b"", 1.0) is Result.OK
    sink.paths["logs"].unlink()  # rotated away by a cleanup, say
    target = _plant(out, f"logs_{NODE}.jsonl")
    assert sink.deliver("logs", message, b"", 1.0) is Result.RETRY
    path = out / f"logs_{NODE}.jsonl"
    assert sink.last_error == f"{path} is a symlink; refusing to write through it"
    assert target.read_text() == "untouched\n"


@SHARED
def test_node_log_symlink_is_refused(shared_tmp: Path, mode: int) -> None:
    """The node log's name is a symlink: the aggregator does not start, one line says why,
    the target is left as it was."""
    logs = _shared(shared_tmp, "logs", mode)
    target = _plant(logs, f"nvrx_log_{NODE}.log")
    agg = Aggregator(config(shared_tmp))
    with pytest.raises(AggregatorError, match="is a symlink; refusing to write through it"):
        agg.open()
    assert target.read_text() == "untouched\n"
