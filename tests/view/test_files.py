"""Which files a path names, how they group into streams, and rotated backups' order."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx_otel.view.files import NODE_LOG, OTLP_JSON, PathError, Tail, find_streams


def _touch(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("")


def test_directory_gives_node_logs_and_otlp_logs_with_backups_oldest_first(tmp_path: Path) -> None:
    _touch(
        tmp_path,
        "nvrx_log_a.log",
        "nvrx_log_a.log.1",
        "nvrx_log_a.log.2",
        "nvrx_log_b.log",
        "logs_a.jsonl",
        "traces_a.jsonl",
        "logs.jsonl",
        "logs-2024-01-15T10-30-45.123-size.jsonl",
        "logs-2024-01-14T09-00-00.000.jsonl",
        "metrics.jsonl",
        "notes.txt",
    )
    (tmp_path / "sub").mkdir()
    _touch(tmp_path / "sub", "nvrx_log_c.log")
    streams = {
        Path(s.key).name: (s.kind, [p.name for p in s.files]) for s in find_streams([str(tmp_path)])
    }
    assert streams == {
        "nvrx_log_a.log": (NODE_LOG, ["nvrx_log_a.log.2", "nvrx_log_a.log.1", "nvrx_log_a.log"]),
        "nvrx_log_b.log": (NODE_LOG, ["nvrx_log_b.log"]),
        "logs_a.jsonl": (OTLP_JSON, ["logs_a.jsonl"]),
        "logs.jsonl": (
            OTLP_JSON,
            [
                "logs-2024-01-14T09-00-00.000.jsonl",
                "logs-2024-01-15T10-30-45.123-size.jsonl",
                "logs.jsonl",
            ],
        ),
    }


def test_globs_and_named_files_each_once(tmp_path: Path) -> None:
    _touch(tmp_path, "nvrx_log_a.log", "nvrx_log_b.log", "mine.txt", "export.json")
    streams = find_streams(
        [
            str(tmp_path / "nvrx_log_*.log"),
            str(tmp_path / "nvrx_log_a.log"),
            str(tmp_path / "mine.txt"),
            str(tmp_path / "export.json"),
        ]
    )
    assert sorted((Path(s.key).name, s.kind) for s in streams) == [
        ("export.jsonl", OTLP_JSON),
        ("mine.txt", NODE_LOG),
        ("nvrx_log_a.log", NODE_LOG),
        ("nvrx_log_b.log", NODE_LOG),
    ]


@pytest.mark.parametrize(
    ("make", "arg", "message"),
    [
        (None, "missing.log", "missing.log: no such file or directory"),
        (None, "nothing-*.log", "nothing-*.log: no file matches"),
        ("dir", "empty", "empty: no node log"),
        ("loop", "nvrx_log_y.log", "nvrx_log_y.log: Too many levels of symbolic links"),
    ],
)
def test_paths_it_cannot_read_are_named(
    tmp_path: Path, make: str | None, arg: str, message: str
) -> None:
    path = tmp_path / arg
    if make == "dir":
        path.mkdir()
    elif make == "loop":  # unreadable even by root
        path.symlink_to(path)
    with pytest.raises(PathError) as err:
        find_streams([str(path)])
    assert str(err.value).startswith(str(tmp_path / message))


def test_tail_holds_a_partial_last_line_until_complete(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one\ntw")
    tail = Tail(path)
    assert list(tail.lines(final=False)) == [(1, "one")]
    with open(path, "ab") as fh:
        fh.write(b"o\nthree")
    assert list(tail.lines(final=False)) == [(2, "two")]
    assert list(tail.lines(final=True)) == [(3, "three")]
    tail.close()


def test_an_output_directory_is_read_from_its_logs_else_its_otlp_subdirectory(
    tmp_path: Path,
) -> None:
    """``nvrx-otel demo`` and ``nvrx-otel run`` write ``logs/`` and ``otlp/`` under their
    directory: the view takes the node logs, the report (which wants OTLP) ``otlp/``."""
    from nvrx_otel.report.analyse import WANTED

    (tmp_path / "logs").mkdir()
    (tmp_path / "otlp").mkdir()
    (tmp_path / "logs" / "nvrx_log_n0.log").write_text("")
    (tmp_path / "otlp" / "logs_n0.jsonl").write_text("")
    (tmp_path / "otlp" / "traces_n0.jsonl").write_text("")
    assert [s.kind for s in find_streams([str(tmp_path)])] == [NODE_LOG]
    assert {Path(s.key).name for s in find_streams([str(tmp_path)], WANTED)} == {
        "logs_n0.jsonl",
        "traces_n0.jsonl",
    }
    (tmp_path / "logs" / "nvrx_log_n0.log").unlink()
    assert [s.kind for s in find_streams([str(tmp_path)])] == [OTLP_JSON]
    with pytest.raises(PathError, match="here or in logs/ or otlp/"):
        find_streams([str(tmp_path / "logs")])
