"""The shipped lnav formats, read by the real lnav (Debian's, installed by
``scripts/install-test-packages.sh``) from files the real front ends wrote: every line of
the file belongs to one record, one record per record written, fields as logged, messages
of several lines kept in one record; and ``nvrx-otel lnav-install``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel import lnav
from tests.conftest import spawn
from tests.faults.node import ROOT, Node
from tests.logs.logflow.kit import run_script

TIMEOUT = 120
INTEGERS = ("workload_rank", "workload_local_rank", "infra_rank", "infra_local_rank", "line",
            "rank")  # fmt: skip


def need_lnav() -> str:
    path = shutil.which("lnav")
    if path is None:
        pytest.fail("lnav is not installed: run scripts/install-test-packages.sh (as root)")
    return path


def lnav_env(home: Path) -> dict[str, str]:
    """lnav's environment: a home of the test's own (never the user's configuration)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update(LANG="C.UTF-8", TERM="dumb")
    if "TZ" in os.environ:
        env["TZ"] = os.environ["TZ"]
    return env


def query(home: Path, sql: str, *files: Path, config: Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``sql`` run by headless lnav over ``files`` (``config``: ``lnav -I``)."""
    argv = [need_lnav(), "-n", "-q"]
    if config is not None:
        argv += ["-I", str(config)]
    argv += ["-c", f";{sql}", "-c", ":write-json-to -", *map(str, files)]
    out = subprocess.run(
        argv, env=lnav_env(home), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert out.returncode == 0 and out.stdout.strip(), (out.returncode, out.stdout, out.stderr)
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def records_in(path: Path, start: re.Pattern[str]) -> list[str]:
    """The file's text cut into records: a line matching ``start`` begins one, any other
    line continues the one before."""
    chunks: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if start.match(line) or not chunks:
            chunks.append([line])
        else:
            chunks[-1].append(line)
    return ["\n".join(c) for c in chunks]


def assert_every_line_in_one_record(
    home: Path, table: str, path: Path, start: re.Pattern[str], written: int
) -> list[dict[str, Any]]:
    """lnav reads ``path`` with format ``table``, finds ``written`` records, and their raw
    texts are exactly the file's lines, each line in one record. Returns the rows."""
    (info,) = query(home, "SELECT format, lines FROM lnav_file", path)
    text = path.read_text(encoding="utf-8")
    assert info == {"format": table, "lines": len(text.splitlines())}
    rows = query(home, f"SELECT *, log_actual_time, log_body, log_raw_text FROM {table}", path)
    assert len(rows) == written
    ints = [k for k in INTEGERS if k in rows[0]]
    typed = " OR ".join(f"({k} IS NOT NULL AND typeof({k}) != 'integer')" for k in ints)
    assert query(home, f"SELECT count(*) AS n FROM {table} WHERE {typed}", path) == [{"n": 0}]
    for row in rows:  # the JSON writer quotes a column's numbers when it begins with NULLs
        row.update({k: int(row[k]) for k in ints if isinstance(row[k], str)})
    assert sorted(r["log_raw_text"] for r in rows) == sorted(records_in(path, start))
    assert sum(r["log_raw_text"].count("\n") + 1 for r in rows) == len(text.splitlines())
    return rows


# --- the node log ------------------------------------------------------------------------

NODE_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[")


def _rank(node: Node, tag: str, **env: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in node.env.items() if k not in ("RANK", "LOCAL_RANK")}
    full.update(env)
    argv = [sys.executable, "-m", "tests.lnav.rank", tag]
    return spawn(argv, env=full, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True)  # fmt: skip


def test_node_log_from_real_ranks_every_record_and_field(tmp_path: Path) -> None:
    """Two ranks and a process without ranks log through ``setup_logger`` (spans,
    tracebacks, escaped control characters, a continuation line that looks like a record);
    the aggregator writes the node log; lnav, with the formats installed where
    ``lnav-install`` puts them by default, finds each record with its fields."""
    need_lnav()
    node = Node(tmp_path / "node")
    node.start()
    procs = [
        _rank(node, "r0", RANK="0", LOCAL_RANK="0"),
        _rank(node, "r1", RANK="1", LOCAL_RANK="1"),
        _rank(node, "launcher"),
    ]
    expected = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        expected += [json.loads(line) for line in out.splitlines()]
    code, err = node.stop()
    assert code == 0, err
    home = tmp_path / "home"
    home.mkdir()
    installed = lnav.install(environ={"HOME": str(home)})
    assert [i.path.parent for i in installed] == [home / ".lnav" / "formats" / "installed"] * 2

    rows = assert_every_line_in_one_record(
        home, "nvrx_node_log", node.log_path, NODE_LINE, len(expected)
    )
    by_key = {(r["workload_rank"], r["line"]): r for r in rows}
    assert len(by_key) == len(rows)
    levels = {"INFO": "info", "WARNING": "warning", "ERROR": "error", "CRITICAL": "critical"}
    traced = 0
    for want in expected:
        got = by_key[(want["rank"], want["line"])]
        stamp = got["log_raw_text"][:23].replace(",", ".")
        first = got["log_body"].split("\n")[0]
        suffix = f" [trace_id={want['trace_id']} span_id={want['span_id']}]"
        assert got["log_actual_time"] == stamp  # log_time: lnav keeps time from going back
        assert got["log_level"] == levels[want["level"]]
        assert (got["node"], got["file"]) == (want["node"], "rank.py")
        assert (got["workload_local_rank"], got["infra_rank"], got["infra_local_rank"]) == (
            want["lrank"], want["irank"], want["ilrank"],
        )  # fmt: skip
        assert (got["trace_id"], got["span_id"]) == (want["trace_id"], want["span_id"])
        assert got["log_raw_text"].count("\n") + 1 == want["lines"]
        if want["lines"] == 1:
            assert got["log_body"] == want["msg"]
        else:  # the body runs on over the continuation lines; a trace suffix stays in it
            assert first == want["msg"] + (suffix if want["trace_id"] else "")
            assert got["log_body"].split("\n")[1:] == got["log_raw_text"].split("\n")[1:]
        traced += want["trace_id"] is not None
    assert traced == 6  # two per process: one line, one with a traceback
    failed = by_key[(1, next(w["line"] for w in expected if w["msg"] == "r1 step failed"))]
    assert failed["log_body"].endswith("\n    ValueError: bad batch")
    assert {(r["workload_rank"], r["infra_rank"]) for r in rows} == {(0, None), (1, None),
                                                                     (None, None)}  # fmt: skip


NODE_TEXT = """\
2024-01-15 10:30:45,123 [INFO] [node 7] [workload:0(0) infra:12(3)] my file.py:45 started
2024-01-15 10:30:45,124 [SUCCESS] [n] [workload:?(?) infra:?(?)] a:b.py:? at host:80 now
2024-01-15 10:30:45,125 [TRACE] [n] [workload:1(1) infra:0(0)] t.py:1 \
 [trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=?]
2024-01-15 10:30:45,126 [Level 25] [n] [workload:1(1) infra:0(0)] t.py:2 x
2024-01-15 10:30:45,127 [NOTICE] [n] [workload:1(1) infra:0(0)] t.py:3 x
2024-01-15 10:30:45,128 [WARN] [n] [workload:1(1) infra:0(0)] t.py:4 x
2024-01-15 10:30:45,129 [FAILURE] [n] [workload:1(1) infra:0(0)] t.py:5 x
2024-01-15 10:30:45,130 [FATAL] [n] [workload:1(1) infra:0(0)] t.py:6 x
2024-01-15 10:30:45,131 [Level 5] [n] [workload:1(1) infra:0(0)] t.py:7 x
2024-01-15 10:30:45,132 [DEBUG] [n] [workload:1(1) infra:0(0)] t.py:8 x
2024-01-15 10:30:45,133 [AUDIT] [n] [workload:1(1) infra:0(0)] t.py:9 x
"""


def test_node_log_odd_fields_and_level_names(tmp_path: Path) -> None:
    """Lines the careful formatter writes for odd records (spaces in the node and file,
    ``:`` in the file name, an unknown line, an unknown span id, an empty message) and
    level names beyond stdlib's: loguru's, stdlib's ``Level N``, custom names by prefix."""
    path = tmp_path / "nvrx_log_n.log"
    path.write_text(NODE_TEXT, encoding="utf-8")
    home = tmp_path / "home"
    lnav.install(tmp_path / "cfg")
    shutil.copytree(tmp_path / "cfg", home / ".lnav")
    rows = assert_every_line_in_one_record(home, "nvrx_node_log", path, NODE_LINE, 11)
    first, second, third = rows[:3]
    assert (first["node"], first["file"], first["line"], first["log_body"]) == (
        "node 7",
        "my file.py",
        45,
        "started",
    )
    assert (first["infra_rank"], first["infra_local_rank"]) == (12, 3)
    assert (second["file"], second["line"]) == ("a:b.py", None)
    assert second["log_body"] == "at host:80 now"
    assert (second["workload_rank"], second["infra_local_rank"]) == (None, None)
    assert (third["trace_id"], third["span_id"], third["log_body"]) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        None,
        "",
    )
    assert [r["log_level"] for r in rows] == [
        "info", "notice", "trace", "notice", "notice", "warning", "error", "critical",
        "trace", "debug", "info",
    ]  # fmt: skip


# --- the LogFlow run file ----------------------------------------------------------------

RUN_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| ")

LOGURU_SCRIPT = """
import json, logging, sys
from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging

configure_logging(log_dir="logs", script_name="train", file_level="TRACE")
log = get_logger("train.loop")
logger_name = __name__
rows = []

def row(msg, level, line, lines=1, module=logger_name, function="<module>"):
    rows.append(dict(msg=msg, level=level, line=line, lines=lines, module=module,
                     function=function))

def here():
    return sys._getframe(1).f_lineno

log.trace("tracing"); row("tracing", "trace", here())
log.debug("debugging"); row("debugging", "debug", here())
log.info("a | bar | and: colons:1"); row("a | bar | and: colons:1", "info", here())
log.success("saved"); row("saved", "notice", here())
log.level("NOTICE", no=25)
log.log("NOTICE", "custom notice"); row("custom notice", "notice", here())
log.level("FAILURE", no=45)
log.log("FAILURE", "custom failure"); row("custom failure", "error", here())
log.warning("two\\nlines"); row("two", "warning", here(), lines=2)

def step():
    try:
        raise ValueError("bad batch")
    except ValueError:
        log.exception("step failed"); row("step failed", "error", here(), lines=0, function="step")

step()
logging.getLogger("lib").error("from stdlib"); row("from stdlib", "error", here())
log.critical("last"); row("last", "critical", here())
shutdown_logging()
print(json.dumps(rows))
"""


@pytest.mark.parametrize("rank", [None, 2])
def test_run_file_from_the_loguru_front_end(tmp_path: Path, rank: int | None) -> None:
    """A script logging through the loguru front end (LogFlow's API) at every level,
    custom levels, a message of two lines, an exception, a stdlib record: lnav finds each
    record of its run file with level, rank tag, module, function, line and body."""
    need_lnav()
    env = {} if rank is None else {"RANK": str(rank)}
    out = run_script(tmp_path, "job", LOGURU_SCRIPT, timeout=TIMEOUT, **env)
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout)
    path = tmp_path / "logs" / "train.log"
    home = tmp_path / "home"
    home.mkdir()
    lnav.install(environ={"HOME": str(home)})
    rows = assert_every_line_in_one_record(home, "nvrx_logflow_log", path, RUN_LINE, len(expected))
    for want, got in zip(expected, rows, strict=True):
        assert got["log_level"] == want["level"]
        assert got["rank"] == rank
        assert (got["module"], got["function"], got["line"]) == (
            want["module"], want["function"], want["line"],
        )  # fmt: skip
        assert got["log_body"].split("\n")[0] == want["msg"]
        assert got["log_body"] == got["log_raw_text"].split(" | ", 3 if rank is None else 4)[-1]
        if want["lines"]:
            assert got["log_raw_text"].count("\n") + 1 == want["lines"]
    failed = next(r for r in rows if r["log_body"].startswith("step failed"))
    assert "\nTraceback (most recent call last):\n" in failed["log_body"]
    assert failed["log_body"].endswith("ValueError: bad batch")


# --- nvrx-otel lnav-install --------------------------------------------------------------


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME",)}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "nvrx_otel.cli", "lnav-install", *args],
        env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip


def test_lnav_install_dest_writes_formats_lnav_then_uses(tmp_path: Path) -> None:
    dest = tmp_path / "cfg"
    out = _cli("--dest", str(dest), home=tmp_path)
    assert out.returncode == 0, out.stderr
    files = [dest / "formats" / "installed" / f"{name}.json" for name in lnav.FORMATS]
    assert out.stdout.splitlines() == [
        f"installed: {files[0]} (format nvrx_node_log: the node log, nvrx_log_<node id>.log)",
        f"installed: {files[1]} (format nvrx_logflow_log: LogFlow's run file, "
        "<log dir>/<script>.log)",
        f"use it with: lnav -I {dest} FILE...",
    ]
    assert [f.read_bytes() for f in files] == [lnav.format_text(n) for n in lnav.FORMATS]
    again = _cli("--dest", str(dest), home=tmp_path)
    assert again.returncode == 0 and again.stdout.startswith(f"up to date: {files[0]} ")
    log = tmp_path / "nvrx_log_n.log"
    log.write_text(NODE_TEXT, encoding="utf-8")
    home = tmp_path / "home"
    rows = query(home, "SELECT format FROM lnav_file", log, config=dest)
    assert rows == [{"format": "nvrx_node_log"}]
    assert not (tmp_path / ".lnav").exists()  # the CLI's home: only DEST was written
    assert not list((home / ".lnav").rglob("nvrx*"))  # lnav found them through -I DEST


def test_lnav_install_default_goes_where_lnav_looks(tmp_path: Path) -> None:
    """The directory ``lnav-install`` picks is the one lnav 0.11 reports (``lnav -h``) for
    each layout of a home: ``~/.lnav``, ``$XDG_CONFIG_HOME/lnav``, ``~/.config/lnav``."""
    binary = need_lnav()
    layouts = {
        "bare": ((), None),
        "dotconfig": ((".config",), None),
        "xdg": ((".config", "xdg"), "xdg"),
        "xdg-missing": ((".config",), "nowhere"),
        "dotlnav": ((".lnav", ".config", "xdg"), "xdg"),
    }
    for name, (dirs, xdg) in layouts.items():
        home = tmp_path / name
        for d in dirs:
            (home / d).mkdir(parents=True)
        home.mkdir(exist_ok=True)
        env = lnav_env(home)
        if xdg is not None:
            env["XDG_CONFIG_HOME"] = str(home / xdg)
        out = subprocess.run(
            [binary, "-h"], env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
        text = out.stdout + out.stderr
        m = re.search(r"format files are stored in:\s*\S*\s*(/\S+)", text)
        assert m, text
        assert lnav.config_dir(env) == Path(m[1]), name


def test_lnav_install_errors_are_one_line_and_nonzero(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = _cli("--dest", str(blocker), home=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (
        f"nvrx-otel lnav-install: error: cannot create {blocker}/formats/installed: "
        "Not a directory\n"
    )
    out = _cli(home=tmp_path / "missing")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1
    assert "no home directory" in out.stderr and "--dest DIR" in out.stderr


def test_lnav_install_help_has_an_example(tmp_path: Path) -> None:
    out = _cli("--help", home=tmp_path)
    assert out.returncode == 0
    assert "--dest DIR" in out.stdout and "lnav -I /shared/lnav" in out.stdout
    assert "nvrx-otel lnav-install\n" in out.stdout


def test_lnav_accepts_the_formats_and_their_samples(tmp_path: Path) -> None:
    """lnav checks each format's samples against its patterns and expected levels when it
    loads them; ``-W`` prints any problem with the configuration."""
    home = tmp_path / "home"
    home.mkdir()
    lnav.install(environ={"HOME": str(home)})
    empty = tmp_path / "empty.log"
    empty.write_text("")
    out = subprocess.run(
        [need_lnav(), "-W", "-n", "-c", ";SELECT 1", str(empty)],
        env=lnav_env(home), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and "nvrx" not in out.stdout + out.stderr, out.stdout + out.stderr
    for name in lnav.FORMATS:
        doc = json.loads(lnav.format_text(name))
        assert doc[name]["sample"]
