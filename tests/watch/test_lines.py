"""Captured bytes into lines: newlines, carriage-return rewrites, the cap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nvrx_otel.watch.lines import Line, LineSplitter, final_state


def split(chunks: list[bytes], cap: int = 1000) -> list[Line]:
    s = LineSplitter(cap)
    out = [line for chunk in chunks for line in s.feed(chunk)]
    return out + list(s.finish())


def test_lines_end_at_newlines_across_chunks() -> None:
    assert split([b"a\nb", b"c\n", b"d"]) == [Line(b"a", 0), Line(b"bc", 0), Line(b"d", 0)]


def test_a_bar_rewritten_ten_thousand_times_is_one_line_of_its_final_state() -> None:
    s = LineSplitter(1000)
    out: list[Line] = []
    for i in range(10_000):
        out += s.feed(f"\r{i / 100:.2f}%|{'#' * (i // 500)}".encode())
        assert s.pending < 100  # only one state is ever held
    out += s.feed(b"\n")
    assert out == [Line(("\r99.99%|" + "#" * 19).encode()[1:], 0)]


def test_a_line_ending_in_a_carriage_return_keeps_its_last_state() -> None:
    assert split([b"50%\r", b"100%\r", b"\n"]) == [Line(b"100%", 0)]
    assert final_state(b"a\r\r") == b"a"
    assert split([b"windows\r\n"]) == [Line(b"windows", 0)]


def test_a_line_over_the_cap_keeps_its_head_and_counts_the_rest() -> None:
    out = split([b"x" * 6000, b"y" * 4000 + b"\nnext\n"], cap=1024)
    assert out == [Line(b"x" * 1024, 10000 - 1024), Line(b"next", 0)]


def test_a_ten_megabyte_line_holds_no_more_than_the_cap() -> None:
    s = LineSplitter(4096)
    out: list[Line] = []
    for _ in range(160):
        out += s.feed(b"z" * 65536)
        assert s.pending <= 4096
    out += s.feed(b"\n")
    assert out == [Line(b"z" * 4096, 160 * 65536 - 4096)]


@given(st.lists(st.binary(max_size=50), max_size=20))
def test_without_carriage_returns_lines_are_the_newline_split(chunks: list[bytes]) -> None:
    chunks = [c.replace(b"\r", b"") for c in chunks]
    data = b"".join(chunks)
    expected = data.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()
    assert [line.data for line in split(chunks)] == expected


def test_captured_lines_are_info_in_the_level_table() -> None:
    from nvrx_otel import levels

    assert levels.severity_of_name("STDERR") == levels.severity_of_name("stdout") == 9
    assert levels.severity_of_name("NOTALEVEL") == 0
