"""Run tags: ``experiment``, ``run_id`` and any ``key=value``, bound once per process.

They are part of the process's identity (:attr:`~nvrx_otel.identity.Identity.run_tags`), so
they go where the identity's resource attributes go: into the header of every spool file
(the aggregator's OTLP resource for every log record, from either front end, and every
span of the process) and into the SDK tracing path's ``Resource``. A record itself carries
no copy: the cost per record is nothing. Keys: ``experiment`` → ``nv.nvrx.run.experiment``,
``run_id`` → ``nv.nvrx.run.id``, any other → ``nv.nvrx.run.tag.<key>``.

Bind them before the first record (spool headers are written when a writer starts), from
``NVRX_OTEL_RUN_TAGS`` (the launcher's environment: every rank) or :func:`set_run_tags`,
which also exports them to ``NVRX_OTEL_RUN_TAGS`` for the processes this one starts.
"""

from __future__ import annotations

import os

from nvrx_otel import env
from nvrx_otel.envparse import check_tag, format_tags
from nvrx_otel.identity import get_identity, run_tag_key, set_identity


def set_run_tags(
    *, experiment: str | None = None, run_id: str | None = None, **tags: object
) -> dict[str, str]:
    """Bind this process's run tags (replacing those bound before, and those of
    ``NVRX_OTEL_RUN_TAGS``) and export them to its children; returns them as attributes.

    Values are kept as text; ``ValueError`` for a key other than letters, digits and
    ``_ . -`` or a value with control characters."""
    pairs: list[tuple[str, object]] = []
    if experiment is not None:
        pairs.append(("experiment", experiment))
    if run_id is not None:
        pairs.append(("run_id", run_id))
    pairs += tags.items()
    checked = tuple(check_tag("set_run_tags()", k, v) for k, v in pairs)
    set_identity(run_tags=checked)
    os.environ[env.NVRX_OTEL_RUN_TAGS] = format_tags(checked)  # processes started from now on
    return run_tags()


def run_tags() -> dict[str, str]:
    """This process's run tags as attributes (``{"nv.nvrx.run.id": "run-0042", ...}``)."""
    return {run_tag_key(k): v for k, v in get_identity().run_tags}
