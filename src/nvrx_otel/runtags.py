"""Run tags: ``experiment``, ``run_id`` and any ``key=value``, bound once per process.

They are part of the process's identity (:attr:`~nvrx_otel.identity.Identity.run_tags`), so
they go where the identity's resource attributes go: into the header of every spool file
(the aggregator's OTLP resource for every log record, from either front end, and every
span of the process) and into the SDK tracing path's ``Resource``. A record itself carries
no copy: the cost per record is nothing. Keys: ``experiment`` → ``nv.nvrx.run.experiment``,
``run_id`` → ``nv.nvrx.run.id``, any other → ``nv.nvrx.run.tag.<key>``.

Bind them before the first record, from ``NVRX_OTEL_RUN_TAGS`` (the launcher's environment:
every rank) or :func:`set_run_tags`, which also exports them to ``NVRX_OTEL_RUN_TAGS`` for
the processes this one starts. A spool file's header is written when the file is made: a
later :func:`set_run_tags` reaches the files made from then on, and says once on stderr
that the records before (and those until the current file is full) keep the old tags.
Tags are bounded (:data:`~nvrx_otel.envparse.RUN_TAGS_MAX_BYTES` as exported) so that
every process can still inherit them.
"""

from __future__ import annotations

import os
import sys
from typing import Final

from nvrx_otel import env
from nvrx_otel.envparse import check_tag, check_tags_size, format_tags, warn_once
from nvrx_otel.identity import get_identity, run_tag_key, set_identity

LATE: Final = (
    "set_run_tags() after this process began spooling: its records already spooled, and "
    "those written until each spool file is full, keep the run tags bound before (a spool "
    "file's header holds them); its next files carry the new ones. Bind run tags before "
    "the first record"
)
"""Said once on stderr by a late :func:`set_run_tags`."""


def set_run_tags(
    *, experiment: str | None = None, run_id: str | None = None, **tags: object
) -> dict[str, str]:
    """Bind this process's run tags (replacing those bound before, and those of
    ``NVRX_OTEL_RUN_TAGS``) and export them to its children; returns them as attributes.

    Values are kept as text; ``ValueError`` for a key other than letters, digits and
    ``_ . -``, a value with control characters, or tags taking more than
    :data:`~nvrx_otel.envparse.RUN_TAGS_MAX_BYTES` as exported (naming the largest); then
    nothing is changed."""
    pairs: list[tuple[str, object]] = []
    if experiment is not None:
        pairs.append(("experiment", experiment))
    if run_id is not None:
        pairs.append(("run_id", run_id))
    pairs += tags.items()
    checked = tuple(check_tag("set_run_tags()", k, v) for k, v in pairs)
    check_tags_size("set_run_tags()", checked)  # before anything changes
    set_identity(run_tags=checked)
    os.environ[env.NVRX_OTEL_RUN_TAGS] = format_tags(checked)  # processes started from now on
    writers = sys.modules.get("nvrx_otel.spool.writer")  # not imported: nothing spooled yet
    if writers is not None and writers.take_identity_resource():
        warn_once(LATE)
    return run_tags()


def run_tags() -> dict[str, str]:
    """This process's run tags as attributes (``{"nv.nvrx.run.id": "run-0042", ...}``)."""
    return {run_tag_key(k): v for k, v in get_identity().run_tags}
