"""Inputs for the log view made through the real path (ranks with ``setup_logger``, the
aggregator process with ``--otlp-json``) or written with the node log's formatter, and
the ``nvrx-otel logs`` command as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from nvrx_otel.nodeline import format_records
from tests.aggregator.spoolkit import process_env
from tests.conftest import spawn

RANK_SCRIPT = Path(__file__).with_name("view_rank.py")
NS = 1_000_000_000
BASE_NS = 1_700_000_000 * NS  # a whole second: node-log times keep milliseconds


class Node:
    """A node of a test job: its aggregator process (own spool under ``tmp/<node>``, node
    log in ``tmp/logs``, with ``otlp_json`` also ``tmp/otlp/logs_<node>.jsonl``) and its
    ranks, each running :data:`RANK_SCRIPT`."""

    def __init__(self, tmp: Path, node: str, ranks: range, steps: int, *, otlp_json: bool) -> None:
        self.done = tmp / node / "done"
        self.done.parent.mkdir(parents=True, exist_ok=True)
        env = process_env(tmp / node, node, SLURM_JOB_ID="job1")
        cmd = [
            sys.executable,
            "-m",
            "nvrx_otel.logging.aggregator",
            "--log-dir",
            str(tmp / "logs"),
            "--wait-file",
            str(self.done),
            "--check-interval",
            "0.05",
            "--drain-timeout",
            "30",
            "--job-id",
            "job1",
        ]
        if otlp_json:
            cmd += ["--otlp-json", str(tmp / "otlp")]
        self.agg = spawn(cmd, env=env, stderr=subprocess.PIPE)
        self.ranks = [
            spawn(
                [sys.executable, str(RANK_SCRIPT), str(steps)],
                env={**env, "RANK": str(r), "LOCAL_RANK": str(r - ranks.start)},
            )
            for r in ranks
        ]

    def finish(self) -> None:
        """Wait for the ranks, then let the aggregator drain and exit."""
        for p in self.ranks:
            assert p.wait(timeout=120) == 0
        self.done.touch()
        _, err = self.agg.communicate(timeout=120)
        assert self.agg.returncode == 0, err.decode()


def record(ts_ns: int, msg: str, **fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"ts": ts_ns, "lvl": "INFO", "file": "train.py", "line": 7, "msg": msg}
    d.update({"rank": 0, "lrank": 0, "irank": 0, "ilrank": 0})
    d.update(fields)
    return d


def write_log(path: Path, node: str, records: list[dict[str, Any]], mode: str = "w") -> None:
    """A node log holding ``records``, written by the node log's own formatter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as fh:
        fh.write(format_records(records, node))


def otlp_line(node: str, rank: int, records: list[tuple[int, str, str]]) -> str:
    """One OTLP/JSON logs request of one rank (``(ts ns, level, body)`` each), in the
    collector file exporter's shape."""
    import orjson

    sev = {"DEBUG": 5, "INFO": 9, "WARNING": 13, "ERROR": 17}
    doc = {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [
                        {"key": "nv.nvrx.node.id", "value": {"stringValue": node}},
                        {"key": "nv.nvrx.workload.rank", "value": {"intValue": str(rank)}},
                    ]
                },
                "scopeLogs": [
                    {
                        "scope": {"name": "nvrx"},
                        "logRecords": [
                            {
                                "timeUnixNano": str(ts),
                                "severityNumber": sev[lvl],
                                "severityText": lvl,
                                "body": {"stringValue": body},
                                "attributes": [
                                    {"key": "code.file.path", "value": {"stringValue": "/x/a.py"}},
                                    {"key": "code.line.number", "value": {"intValue": "3"}},
                                ],
                            }
                            for ts, lvl, body in records
                        ],
                    }
                ],
            }
        ]
    }
    return orjson.dumps(doc).decode() + "\n"


def logs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``nvrx-otel logs ARGS`` as a process whose stdout is a pipe."""
    return subprocess.run(
        [sys.executable, "-m", "nvrx_otel", "logs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def entry(ts_ns: int, text: str = "m", **fields: Any) -> Any:
    """An :class:`~nvrx_otel.view.entry.Entry` with defaults for what a test leaves out."""
    from nvrx_otel.view.entry import Entry

    values: dict[str, Any] = dict(
        ts_ns=ts_ns,
        level="INFO",
        severity=9,
        node="n",
        rank=0,
        lrank=0,
        irank=0,
        ilrank=0,
        file="f.py",
        line=1,
        text=text,
        trace_id=None,
        span_id=None,
        loss=None,
        path="p",
        number=1,
    )
    values.update(fields)
    return Entry(**values)
