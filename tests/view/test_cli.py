"""``nvrx-otel logs`` as a process: a real job's node log and OTLP JSON in one view, the
filters and de-duplication from the command line, errors, pipes, terminals, --follow."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from nvrx_otel.nodeline import local_time
from tests.aggregator.spoolkit import wait_for
from tests.conftest import spawn
from tests.view.viewkit import BASE_NS, Node, logs, otlp_line, record, write_log

STEPS = 5
HEAD = re.compile(r"^(\S+ \S+) \[(\w+)\] \[([^\]]+)\] \[workload:(\d+)")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two nodes run at once through the real path: node-a's ranks 0-1 read from its node
    log, node-b's ranks 2-3 from its ``--otlp-json`` file."""
    tmp = tmp_path_factory.mktemp("job")
    nodes = [
        Node(tmp, "node-a", range(0, 2), STEPS, otlp_json=False),
        Node(tmp, "node-b", range(2, 4), STEPS, otlp_json=True),
    ]
    for n in nodes:
        n.finish()
    return tmp


def _job_args(job: Path) -> list[str]:
    return [str(job / "logs" / "nvrx_log_node-a.log"), str(job / "otlp")]


def _heads(out: str) -> list[tuple[str, str, str, int]]:
    found = []
    for line in out.splitlines():
        m = HEAD.match(line)
        if m:
            found.append((m[1], m[2], m[3], int(m[4])))
    return found


def test_node_log_and_otlp_json_of_two_nodes_in_one_time_order(job: Path) -> None:
    run = logs(*_job_args(job), "--no-dedup")
    assert run.returncode == 0 and run.stderr == ""
    heads = _heads(run.stdout)
    per_rank = 2 * STEPS + 2
    assert len(heads) == 4 * per_rank
    assert {(node, rank) for _, _, node, rank in heads} == {
        ("node-a", 0),
        ("node-a", 1),
        ("node-b", 2),
        ("node-b", 3),
    }
    times = [t for t, _, _, _ in heads]
    assert times == sorted(times)  # milliseconds: the node log's precision
    for rank in range(4):  # each rank's own records keep their order
        mine = [line for line in run.stdout.splitlines() if f"rank {rank} step " in line]
        assert [int(line.rsplit(" ", 1)[1]) for line in mine] == list(range(STEPS))


def test_multi_line_records_are_kept_whole_from_both_sources(job: Path) -> None:
    out = logs(*_job_args(job), "--level", "warning").stdout
    for rank in range(4):
        assert f"rank {rank} saw two\n    lines\n" in out
    blocks = re.findall(r"step failed \[trace_id=\w+ span_id=\w+\]\n((?:    .*\n)+)", out)
    assert len(blocks) == 4
    for block in blocks:
        assert block.startswith("    Traceback (most recent call last):\n")
        assert "    ValueError: bad batch on rank " in block


def test_filters_from_the_command_line(job: Path) -> None:
    args = _job_args(job)
    ranks = {r for _, _, _, r in _heads(logs(*args, "--rank", "1-2", "--no-dedup").stdout)}
    assert ranks == {1, 2}
    nodes = {n for _, _, n, _ in _heads(logs(*args, "--node", "node-b").stdout)}
    assert nodes == {"node-b"}
    errors = _heads(logs(*args, "--level", "error").stdout)
    assert [lvl for _, lvl, _, _ in errors] == ["ERROR"] * 4
    failed = logs(*args, "--rank", "3", "--level", "error").stdout
    trace = re.search(r"trace_id=(\w{32})", failed)
    assert trace is not None
    same = _heads(logs(*args, "--trace", trace[1][:12]).stdout)
    assert [(n, r) for _, _, n, r in same] == [("node-b", 3)]
    assert logs(*args, "--until", "2000-01-01").stdout == ""
    for since in ("--since=-1h", "--since=1h"):  # relative: that long ago
        assert len(_heads(logs(*args, since, "--no-dedup").stdout)) == 4 * (2 * STEPS + 2)


def test_json_output_one_object_per_record(job: Path) -> None:
    run = logs(*_job_args(job), "--json", "--no-dedup")
    docs = [orjson.loads(line) for line in run.stdout.splitlines()]
    assert len(docs) == 4 * (2 * STEPS + 2)
    assert [d["ts_ns"] for d in docs] == sorted(d["ts_ns"] for d in docs)
    assert {d["node"] for d in docs} == {"node-a", "node-b"}


def test_dedup_collapses_identical_messages_across_ranks_and_nodes(tmp_path: Path) -> None:
    for node in range(2):
        recs = [
            record(BASE_NS + r * 10_000_000, "checkpoint saved", rank=node * 8 + r)
            for r in range(8)
        ]
        recs.append(record(BASE_NS + 3_000_000_000, "checkpoint saved", rank=node * 8))
        recs.append(record(BASE_NS + 5_000, f"only node {node}", rank=node * 8))
        write_log(tmp_path / f"nvrx_log_n{node}.log", f"n{node}", recs)
    out = logs(str(tmp_path)).stdout.splitlines()
    assert [line.split("] ", 4)[-1] for line in out] == [
        "train.py:7 checkpoint saved [repeated 16x across ranks 0-15 on 2 nodes]",
        "train.py:7 only node 0",
        "train.py:7 only node 1",
        "train.py:7 checkpoint saved [repeated 2x across ranks 0,8 on 2 nodes]",
    ]
    assert len(logs(str(tmp_path), "--no-dedup").stdout.splitlines()) == 20


def test_malformed_line_is_named_once_and_the_others_shown(tmp_path: Path) -> None:
    path = tmp_path / "nvrx_log_n.log"
    write_log(path, "n", [record(BASE_NS, "before")])
    with open(path, "a") as fh:
        fh.write("garbage that is no record\n")
    write_log(path, "n", [record(BASE_NS + 1_000_000, "after")], mode="a")
    otlp = tmp_path / "logs_m.jsonl"
    otlp.write_text(otlp_line("m", 1, [(BASE_NS + 500_000, "INFO", "otlp")]) + "{broken\n")
    run = logs(str(tmp_path))
    assert run.returncode == 0
    assert [line.rsplit(" ", 1)[1] for line in run.stdout.splitlines()] == [
        "before",
        "otlp",
        "after",
    ]
    assert sorted(run.stderr.splitlines()) == [  # in the order the streams are read
        f"nvrx-otel logs: {otlp}:2: skipped, not a log record: '{{broken'",
        f"nvrx-otel logs: {path}:2: skipped, not a log record: 'garbage that is no record'",
    ]


def test_missing_path_exits_non_zero_naming_it(tmp_path: Path) -> None:
    write_log(tmp_path / "nvrx_log_n.log", "n", [record(BASE_NS, "x")])
    run = logs(str(tmp_path), str(tmp_path / "nope"))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == f"nvrx-otel logs: error: {tmp_path / 'nope'}: no such file or directory\n"


def test_help_shows_an_example() -> None:
    run = logs("--help")
    assert run.returncode == 0
    assert "examples:" in run.stdout and "nvrx-otel logs logs/1234/ --rank 0-3,7" in run.stdout


def _ansi_input(tmp_path: Path) -> None:
    (tmp_path / "logs_n.jsonl").write_text(
        otlp_line("n", 0, [(BASE_NS, "ERROR", "\x1b[31mred\x1b[0m")])
    )


def test_pipe_output_has_no_ansi_codes(tmp_path: Path) -> None:
    _ansi_input(tmp_path)
    run = logs(str(tmp_path), env={**os.environ, "FORCE_COLOR": "1"})
    assert run.stdout.endswith("a.py:3 \\x1b[31mred\\x1b[0m\n")
    assert "\x1b" not in run.stdout


def test_terminal_output_is_coloured_and_escapes_the_message(tmp_path: Path) -> None:
    _ansi_input(tmp_path)
    master, slave = pty.openpty()
    proc = spawn(
        [sys.executable, "-m", "nvrx_otel", "logs", str(tmp_path)],
        stdout=slave,
        env={k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
        | {"TERM": "xterm-256color"},
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the process closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = out.decode()
    assert "\x1b[" in text  # styles
    assert "\\x1b[31mred\\x1b[0m" in text and "\x1b[31mred" not in text


def test_follow_shows_appended_lines_and_the_rotated_log(tmp_path: Path) -> None:
    path = tmp_path / "nvrx_log_n.log"
    now = time.time_ns()
    write_log(path, "n", [record(now, "first")])
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out:
        proc = spawn(
            [sys.executable, "-m", "nvrx_otel", "logs", "--follow", str(tmp_path)],
            stdout=out,
            stderr=subprocess.PIPE,
        )
    try:
        wait_for(lambda: "first" in out_path.read_text(), timeout=30, what="first record")
        write_log(path, "n", [record(time.time_ns(), "second\nwith more")], mode="a")
        wait_for(
            lambda: "second\n    with more\n" in out_path.read_text(),
            timeout=30,
            what="appended record",
        )
        path.rename(tmp_path / "nvrx_log_n.log.1")
        write_log(path, "n", [record(time.time_ns(), "third")])
        wait_for(lambda: "third" in out_path.read_text(), timeout=30, what="record after rotation")
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = out_path.read_text().splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines if not line.startswith("    ")] == [
        "first",
        "second",
        "third",
    ]
    assert lines[0].startswith(local_time(now))


def test_a_reader_that_stops_early_ends_it_quietly(tmp_path: Path) -> None:
    recs = [record(BASE_NS + i * 1_000_000, f"line {i}") for i in range(20_000)]
    write_log(tmp_path / "nvrx_log_n.log", "n", recs)
    proc = spawn(
        [sys.executable, "-m", "nvrx_otel", "logs", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # `| head -1`
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().rstrip().endswith(b"line 0")
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
