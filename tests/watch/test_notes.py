"""The watcher's expected lines (notes.Expected): matched once, with torch's prefix or
colour codes, and forgotten after their time to live."""

from __future__ import annotations

from nvrx_otel.watch.notes import Expected, line_hash


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_expected_line_is_taken_once_prefixed_or_coloured() -> None:
    e = Expected(Clock())
    e.add(2, [line_hash(b"loss is NaN")] * 3)
    assert e.take(2, b"loss is NaN")
    assert e.take(2, b"[rank3]: loss is NaN")
    assert e.take(2, b"\x1b[1;31mloss is NaN\x1b[0m")
    assert not e.take(2, b"loss is NaN")  # three announced, three taken
    assert not e.take(1, b"loss is NaN")  # another stream


def test_an_expectation_is_forgotten_after_its_time_to_live() -> None:
    clock = Clock()
    e = Expected(clock)
    e.add(2, [line_hash(b"disk full")])
    clock.now += Expected.TTL_S + 1
    assert not e.take(2, b"disk full")  # announced, never printed: a later line is its own
    e.add(2, [line_hash(b"disk full")])
    clock.now += Expected.TTL_S - 1
    assert e.take(2, b"disk full")
