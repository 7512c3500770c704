"""The rank as LogFlow resolves it, and whether this is the main process.

LogFlow's rank (used for console gating and the ``[rank N] | `` tag, so output matches
LogFlow's): ``RANK``, else ``SLURM_PROCID``, else, when ``LOCAL_RANK`` is set,
``NODE_RANK`` (or ``GROUP_RANK``, default 0) * ``LOCAL_WORLD_SIZE`` (default 1) +
``LOCAL_RANK``; None when none is set. A value that is not a number is skipped, as LogFlow
does. The OTel resource keeps using :mod:`nvrx_otel.identity`.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping

from nvrx_otel import env

_forked = False


def logflow_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The global rank by LogFlow's rules, or None outside a distributed job."""
    e = os.environ if environ is None else environ
    for name in (env.RANK, env.SLURM_PROCID):
        value = _int(e.get(name))
        if value is not None:
            return value
    local = _int(e.get(env.LOCAL_RANK))
    if local is None:
        return None
    node_text = e.get(env.NODE_RANK, e.get(env.GROUP_RANK, "0"))
    node = _int(node_text)
    size = _int(e.get(env.LOCAL_WORLD_SIZE, "1"))
    if node is None or size is None:
        return None
    return node * size + local


def rank_tag(rank: int | None) -> str:
    """LogFlow's tag in front of the logger name: ``[rank N] | `` above rank 0, else empty."""
    return f"[rank {rank}] | " if rank else ""


def is_main_process() -> bool:
    """True in a job's main process: not a ``multiprocessing`` child, not forked."""
    return not _forked and multiprocessing.current_process().name == "MainProcess"


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)
