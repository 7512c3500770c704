"""Package names imported when first asked for (PEP 562), so that importing a package
imports only what its users use: one ``__getattr__`` for every package that wants it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def attributes(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``homes`` is imported from its
    module once and kept in ``namespace`` (the package's globals), so it is asked once."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value
        return value

    return __getattr__
