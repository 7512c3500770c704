"""How to type an ``nvrx-otel`` command so that it runs as printed: the tools print next
steps (``nvrx-otel logs …``), and a bare ``nvrx-otel`` is wrong when it is not on PATH (a
virtual environment's ``.venv/bin/nvrx-otel`` run by its path, ``python -m nvrx_otel``)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys

NAME = "nvrx-otel"


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def prefix() -> list[str]:
    """The words that start an ``nvrx-otel`` command the way this process was started:
    ``nvrx-otel`` when that name on PATH is this program, else the program's path as
    typed, else ``<python> -m nvrx_otel``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == NAME and os.path.isfile(argv0):
        on_path = shutil.which(NAME)
        if on_path is not None and _same(on_path, argv0):
            return [NAME]
        if os.sep in argv0:
            return [argv0]
    on_path = shutil.which(NAME)
    if on_path is not None and _same(os.path.dirname(on_path), os.path.dirname(sys.executable)):
        return [NAME]  # this interpreter's own script is on PATH
    return [sys.executable, "-m", "nvrx_otel"]


def line(*words: str) -> str:
    """A command line ``nvrx-otel <words>`` that runs as printed (quoted for a shell)."""
    return shlex.join([*prefix(), *words])
