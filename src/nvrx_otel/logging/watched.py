"""Lists that tell their owner when they change.

The ``"nvrx"`` logger's lean path may run only while the logger has no filters, our spool
handler as its only handler, and that handler no filters. Reading and comparing those
lists on every call costs about 600 instructions (a sixth of the call); instead the
logger's and the handler's ``handlers``/``filters`` are ``WatchedList`` s, and every change
to one (``addHandler``, ``addFilter``, ``handlers.append``, slice assignment, ...) makes
the owner work the answer out again. A plain list assigned in their place is not watched:
the owner then keeps the full stdlib path until it is given a watched one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class ListOwner(Protocol):
    def _nvrx_list_changed(self, done: bool) -> None:
        """Called with ``done=False`` before a watched list changes, ``True`` after."""


class WatchedList(list):  # type: ignore[type-arg]
    """A ``list`` whose changes call ``owner._nvrx_list_changed`` before and after."""

    __slots__ = ("owner",)

    def __init__(self, owner: ListOwner, items: Any = ()) -> None:
        super().__init__(items)
        self.owner = owner


def _watching(name: str) -> Callable[..., Any]:
    change = getattr(list, name)

    def method(self: WatchedList, *args: Any, **kwargs: Any) -> Any:
        owner = self.owner
        owner._nvrx_list_changed(False)  # before: no call may rely on it now
        try:
            return change(self, *args, **kwargs)
        finally:
            owner._nvrx_list_changed(True)

    method.__name__ = method.__qualname__ = name
    return method


for _name in (
    "__delitem__",
    "__iadd__",
    "__imul__",
    "__setitem__",
    "append",
    "clear",
    "extend",
    "insert",
    "pop",
    "remove",
    "reverse",
    "sort",
):
    setattr(WatchedList, _name, _watching(_name))
