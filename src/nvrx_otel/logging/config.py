"""NVRx's ``LogConfig``: the same classmethods, argument names, defaults and variables.

``LogConfig`` keeps NVRx's semantics (workload rank from ``RANK`` only, infra rank from
SLURM); resource attributes use the richer :mod:`nvrx_otel.identity`.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import ClassVar

from nvrx_otel import env


def _env_int(name: str, default: int | None) -> int | None:
    return env.read(name, env.parse_nonneg_int, default, consequence="treating it as unset")


class LogConfig:
    """Utility class for log configuration (NVRx compatible)."""

    name: ClassVar[str] = "nvrx"

    @classmethod
    def get_node_id(cls) -> str:
        """The node id: ``NVRX_OTEL_NODE_ID``, else the host name."""
        return env.NODE_ID.get() or socket.gethostname()

    @classmethod
    def get_log_file(cls) -> str:
        """The node log's file name: ``nvrx_log_<node id>.log``."""
        return f"nvrx_log_{cls.get_node_id()}.log"

    @classmethod
    def get_node_local_tmp_dir(cls, node_local_tmp_dir: str | None = None) -> str | None:
        """The spool root: the argument, else ``NVRX_NODE_LOCAL_TMPDIR``; None disables it."""
        return env.spool_root(node_local_tmp_dir)

    @classmethod
    def get_max_file_size(cls, file_size_kb: int | None = None) -> int:
        """Spool file size in bytes: the argument in KB, else ``NVRX_LOG_MAX_FILE_SIZE_KB``."""
        return env.spool_file_size(file_size_kb)

    @classmethod
    def get_max_log_files(cls) -> int:
        """Spool files kept per process (``NVRX_LOG_MAX_LOG_FILES``)."""
        return env.spool_files()

    @classmethod
    def get_spool_budget(cls) -> int:
        """Spool bytes per process: ``NVRX_OTEL_SPOOL_BUDGET_MB``, else max files x size x
        ``NVRX_OTEL_SPOOL_SCALE``."""
        return env.spool_budget()

    @classmethod
    def get_workload_rank(cls) -> int | None:
        """``RANK``, None when unset."""
        return _env_int(env.RANK, None)

    @classmethod
    def get_workload_local_rank(cls) -> int | None:
        """``LOCAL_RANK``, None when unset."""
        return _env_int(env.LOCAL_RANK, None)

    @classmethod
    def get_infra_rank(cls) -> int | None:
        """Infrastructure rank with SLURM job array support: for job arrays
        ``array_task_id * nnodes + slurm_procid``, else ``SLURM_PROCID``, else None."""
        procid = _env_int(env.SLURM_PROCID, None)
        task = _env_int(env.SLURM_ARRAY_TASK_ID, None)
        nnodes = _env_int(env.SLURM_NNODES, None)
        if nnodes is None:
            nnodes = _env_int(env.SLURM_JOB_NUM_NODES, None)
        if procid is not None and task is not None and nnodes is not None:
            return task * nnodes + procid
        return procid

    @classmethod
    def get_infra_local_rank(cls) -> int | None:
        """``SLURM_LOCALID``, None when unset."""
        return _env_int(env.SLURM_LOCALID, None)

    @classmethod
    def get_log_level(cls) -> int:
        """DEBUG when ``NVRX_LOG_DEBUG`` is 1/true/yes/on, else INFO."""
        debug = env.LOG_DEBUG.get()
        return logging.DEBUG if debug else logging.INFO

    @classmethod
    def get_log_to_stdout_cfg(cls) -> bool:
        """``NVRX_LOG_TO_STDOUT`` (1/true/yes/on): stdout instead of stderr."""
        return env.LOG_TO_STDOUT.get()

    @classmethod
    def get_process_name(cls, proc_name: str | None = None) -> str:
        """The name, else the pid as a string."""
        return proc_name if proc_name else str(os.getpid())
