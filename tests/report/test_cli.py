"""``nvrx-otel report`` as a command: help with an example, one line on bad input, the
good lines of a malformed file still used, text and JSON output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from nvrx_otel.report.cli import main
from tests.report import fixture


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvrx_otel", "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_help_shows_an_example() -> None:
    done = report("--help")
    assert done.returncode == 0
    assert "nvrx-otel report otlp/ --perfetto job.json --png job.png --html job.html" in (
        done.stdout
    )


def test_a_missing_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = report(str(tmp_path / "nope"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"nvrx-otel report: error: {tmp_path / 'nope'}: no such file or directory"
    ]


def test_a_directory_without_otlp_json_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "nvrx_log_n0.log").write_text("")  # a node log is not what the report reads
    done = report(str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"nvrx-otel report: error: {tmp_path}: no OTLP JSON (logs*.jsonl, traces*.jsonl), "
        "here or in otlp/"
    ]


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "traces_x.jsonl"
    path.symlink_to(path)  # unreadable even by root
    done = report(str(path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"nvrx-otel report: error: {path}: Too many levels of symbolic links"
    ]


def test_a_malformed_line_is_named_and_the_good_lines_are_used(tmp_path: Path) -> None:
    directory = fixture.write(tmp_path)
    done = report(str(directory), "--json")
    assert done.returncode == 0, done.stderr
    bad = directory / "logs_n0.jsonl"
    assert done.stderr.splitlines() == [
        f"nvrx-otel report: {bad}:{fixture.BAD_LINE}: skipped, not a valid OTLP JSON "
        "request: '{not json'"
    ]
    doc = orjson.loads(done.stdout)
    assert doc["skipped_lines"] == 1
    assert doc["logs"] == 112  # every other line's records
    assert doc["first_failure"]["rank"] == 1
    assert [s["rank"] for s in doc["silent"]] == [3]


def test_text_output_names_the_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = fixture.write(tmp_path)
    assert main([str(directory)]) == 0
    out = capsys.readouterr().out
    assert "first failure (its own evidence)" in out
    assert "rank 1 on n0 (cycle 0)" in out
    assert "first failure (by trace)" in out
    assert "could be the other way" in out
    assert "silent ranks" in out
    assert "nv.nvrx.ckpt.save.write" in out


def test_a_bad_threshold_is_one_line(tmp_path: Path) -> None:
    done = report(str(tmp_path), "--silence", "-1")
    assert done.returncode == 2
    assert "--silence: must be 0 or more: '-1'" in done.stderr


def report_without_matplotlib(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``nvrx-otel report ARGS`` where ``import matplotlib`` fails."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('blocked for the test')\n")
    return subprocess.run(
        [sys.executable, "-m", "nvrx_otel", "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(blocker)),  # the package itself is installed
    )


def test_png_without_matplotlib_is_one_clear_line(tmp_path: Path) -> None:
    directory = fixture.write(tmp_path / "job")
    out = tmp_path / "x.png"
    done = report_without_matplotlib(tmp_path, str(directory), "--png", str(out))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"nvrx-otel report: error: --png needs matplotlib: {sys.executable} -m pip install "
        "matplotlib"
    ]  # a command that works from a checkout too, with the interpreter that needs it
    assert not out.exists()


def test_html_without_matplotlib_keeps_the_tables(tmp_path: Path) -> None:
    directory = fixture.write(tmp_path / "job")
    page = tmp_path / "x.html"
    done = report_without_matplotlib(tmp_path, str(directory), "--html", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "No picture: the picture needs matplotlib" in text
    assert "<h2>Stragglers" in text


def test_a_reader_that_left_the_pipe_ends_the_output_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nvrx-otel report ... | head``: the pipe's reader is gone; exit 0, no traceback."""
    import io

    class GonePipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def fileno(self) -> int:
            raise io.UnsupportedOperation("no descriptor")

    monkeypatch.setattr(sys, "stdout", GonePipe())
    directory = fixture.write(tmp_path)
    assert main([str(directory)]) == 0
    assert main([str(directory), "--json"]) == 0


def test_records_of_two_jobs_are_named_and_one_is_chosen_with_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nvrx_otel import semconv
    from tests.report.otlpkit import at, log, logs_line, resource

    lines = [
        logs_line(resource("n0", 0, **{semconv.JOB_ID: "run-a"}), [log(at(1), "a ok")]),
        logs_line(resource("n0", 0, **{semconv.JOB_ID: "run-b"}),
                  [log(at(2), "b broke", "ERROR")]),
    ]  # fmt: skip
    (tmp_path / "logs_n0.jsonl").write_text("".join(lines))
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "the records are of 2 jobs (run-a, run-b)" in err
    printed = err.split("--job, e.g. ", 1)[1].strip()
    assert printed.endswith(f"report {tmp_path} --job run-a"), printed
    ran = subprocess.run(printed, shell=True, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and ran.stdout.startswith("OK: 1 rank"), ran  # runs as printed
    assert main([str(tmp_path), "--job", "run-b", "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["verdict"].startswith("FAILED: rank 0 (n0) b broke") and doc["logs"] == 1
    assert main([str(tmp_path), "--job", "run-c"]) == 2
    assert "no records of job 'run-c'; the jobs found: run-a, run-b" in capsys.readouterr().err
