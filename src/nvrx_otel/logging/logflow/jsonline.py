"""The run file as JSON lines (``file_format: json``): one object per record.

Keys: ``time`` (ISO 8601 with the UTC offset, microseconds), ``level``, ``rank`` (LogFlow's,
null outside a job), ``name`` (the bound name, else the module), ``module``, ``function``,
``line``, ``file``, ``pid``, ``thread``, ``message``, then when present ``extra`` (the bound
values, as given), ``exception`` (the formatted traceback), ``trace_id`` and ``span_id``
(the call site's span, as in the node log).
"""

from __future__ import annotations

import traceback
from typing import Any, Final

import orjson

from nvrx_otel import _tracectx
from nvrx_otel.logging.logflow.bridge import NAME_KEY

_OPTIONS: Final = orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS


def _default(value: Any) -> str:
    return repr(value)


def json_line(record: Any, rank: int | None) -> bytes:
    """One loguru record as a JSON line (bytes, ending in a newline)."""
    extra = record["extra"]
    bound = extra.get(NAME_KEY) if extra else None
    out: dict[str, Any] = {
        "time": record["time"].isoformat(),
        "level": record["level"].name,
        "rank": rank,
        "name": bound if isinstance(bound, str) else record["name"],
        "module": record["name"],
        "function": record["function"],
        "line": record["line"],
        "file": record["file"].name,
        "pid": record["process"].id,
        "thread": record["thread"].name,
        "message": record["message"],
    }
    if extra:
        rest = {k: v for k, v in extra.items() if k != NAME_KEY or not isinstance(v, str)}
        if rest:
            out["extra"] = rest
    exc = record["exception"]
    if exc is not None and exc.type is not None:
        out["exception"] = "".join(traceback.format_exception(exc.type, exc.value, exc.traceback))
    span = _tracectx.current_span()
    if span is not None:
        ctx = span.get_span_context()
        if ctx.is_valid:
            out["trace_id"] = format(ctx.trace_id, "032x")
            out["span_id"] = format(ctx.span_id, "016x")
    try:
        return orjson.dumps(out, default=_default, option=_OPTIONS)
    except Exception:  # a cycle in extra, a lone surrogate, a repr that raises: keep it
        return orjson.dumps(_safe(out), option=_OPTIONS)


def _safe(value: Any, depth: int = 0) -> Any:
    """``value`` made encodable: strings with lone surrogates escaped, what JSON has no
    type for (and anything nested deeper than a few levels) as its repr, a repr that
    fails as a note."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("ascii", "replace")
    if value is None or isinstance(value, (bool, int, float)):
        return value if not isinstance(value, int) or -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, dict) and depth < 8:
        return {_safe(str(k) if not isinstance(k, str) else k): _safe(v, depth + 1)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, (list, tuple)) and depth < 8:
        return [_safe(v, depth + 1) for v in value]
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__
        text = f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"
    return _safe(text)
