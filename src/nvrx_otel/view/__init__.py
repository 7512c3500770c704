"""``nvrx-otel logs``: one chronological view of node logs and OTLP JSON files.

The readers (:mod:`.sources` for node logs, :mod:`.otlpjson` for OTLP JSON lines) turn
either kind of file into the one :class:`~nvrx_otel.view.entry.Entry` type; :mod:`.files`
finds the files and reads them line by line, :mod:`.merge` puts the streams in time order
with bounded memory, :mod:`.filters` and :mod:`.dedup` narrow and collapse them, and
:mod:`.render` writes them. Nothing here imports the aggregator.
"""

from __future__ import annotations

from nvrx_otel.view.entry import Entry, Loss
from nvrx_otel.view.files import PathError
from nvrx_otel.view.read import read_all

__all__ = ["Entry", "Loss", "PathError", "read_all"]
