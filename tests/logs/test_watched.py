"""Every way of changing a watched list tells its owner, before and after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nvrx_otel.logging.watched import WatchedList


class Owner:
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def _nvrx_list_changed(self, done: bool) -> None:
        self.calls.append(done)


def _slice_set(xs: list[Any]) -> None:
    xs[1:2] = [7, 8]


def _item_del(xs: list[Any]) -> None:
    del xs[0]


def _iadd(xs: list[Any]) -> None:
    xs += [5]


def _imul(xs: list[Any]) -> None:
    xs *= 2


CHANGES: list[Callable[[list[Any]], object]] = [
    lambda xs: xs.append(4),
    lambda xs: xs.extend([4, 5]),
    lambda xs: xs.insert(0, 9),
    lambda xs: xs.remove(2),
    lambda xs: xs.pop(),
    lambda xs: xs.clear(),
    lambda xs: xs.sort(reverse=True),
    lambda xs: xs.reverse(),
    lambda xs: xs.__setitem__(0, 6),
    _slice_set,
    _item_del,
    _iadd,
    _imul,
]


@pytest.mark.parametrize("change", CHANGES)
def test_each_change_tells_the_owner_before_and_after(
    change: Callable[[list[Any]], object],
) -> None:
    owner = Owner()
    watched = WatchedList(owner, [3, 1, 2])
    plain = [3, 1, 2]
    change(watched)
    change(plain)
    assert watched == plain and type(watched) is WatchedList  # += and *= keep the object
    assert owner.calls == [False, True]


def test_a_failed_change_still_tells_the_owner_it_is_over() -> None:
    owner = Owner()
    watched = WatchedList(owner, [1])
    with pytest.raises(ValueError):
        watched.remove(5)
    assert owner.calls == [False, True] and watched == [1]


def test_reading_tells_nobody() -> None:
    owner = Owner()
    watched = WatchedList(owner, [1, 2])
    assert list(watched) == [1, 2] and watched[0] == 1 and 2 in watched and len(watched) == 2
    assert watched == [1, 2] and watched[:] == [1, 2] and owner.calls == []
