"""``--perfetto``: the records as Chrome trace-event JSON, which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

One *process* per node (``pid`` from :data:`PID_BASE`, apart from every rank number), one
*thread* (track) per rank (``tid`` = the workload rank; processes without one get a track
of their own, numbered from :data:`OTHER_TID`),
each named by ``M`` metadata events. A span is a complete event (``ph: "X"``, ``ts`` and
``dur`` in microseconds), a log record an instant event (``ph: "i"``, thread scope), a
span link a flow: a start (``ph: "s"``) on the linked span and a finish (``ph: "f"``,
``bp: "e"``) on the linking one, under the same ``id``. Events are written as they are
read, so memory does not grow with the input: only flows whose two ends were both seen are
written, which needs the position of linked spans (kept for the last :data:`SPANS_KEPT`
spans) and of links waiting for their span (at most :data:`SPANS_KEPT`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import IO, Any, Final

import orjson

from nvrx_otel.report.otlp import Item, Span

PID_BASE: Final = 1 << 24
OTHER_TID: Final = 1 << 23
SPANS_KEPT: Final = 100_000
_TEXT_MAX: Final = 200

Position = tuple[int, int, float]  # pid, tid, ts (us)


def _us(ns: int) -> float:
    return ns / 1000


class PerfettoWriter:
    """A record sink writing trace events to ``out``; :meth:`close` ends the document."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.pids: dict[str, int] = {}
        self.tids: dict[tuple[int, Any], int] = {}
        self.names: list[dict[str, Any]] = []
        self.spans: OrderedDict[str, Position] = OrderedDict()
        self.waiting: OrderedDict[str, list[tuple[int, Position]]] = OrderedDict()
        self.flows = 0
        self.unmatched = 0
        self.first = True
        out.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')

    def _emit(self, event: dict[str, Any]) -> None:
        data = orjson.dumps(event)
        self.out.write(data if self.first else b",\n" + data)
        self.first = False

    def _pid(self, node: str | None) -> int:
        name = node or "?"
        pid = self.pids.get(name)
        if pid is None:
            pid = self.pids[name] = PID_BASE + len(self.pids)
            self.names.append(
                {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
            )
            self.names.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "args": {"sort_index": pid - PID_BASE},
                }
            )
        return pid

    def _tid(self, pid: int, rank: int | None, other: Any, label: str) -> int:
        key = (pid, rank if rank is not None else ("other", other))
        tid = self.tids.get(key)
        if tid is None:
            tid = rank if rank is not None else OTHER_TID + len(self.tids)
            self.tids[key] = tid
            self.names.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}}
            )
            self.names.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return tid

    def __call__(self, item: Item) -> None:
        if isinstance(item, Span):
            self._span(item)
            return
        pid = self._pid(item.node)
        rank = item.rank
        label = f"rank {rank}" if rank is not None else f"infra {item.irank}"
        tid = self._tid(pid, rank, ("infra", item.irank), label)
        self._emit(
            {
                "name": item.first_line[:_TEXT_MAX],
                "cat": "log",
                "ph": "i",
                "s": "t",
                "ts": _us(item.ts_ns),
                "pid": pid,
                "tid": tid,
                "args": {"level": item.level, "message": item.text, "origin": item.origin},
            }
        )

    def _span(self, s: Span) -> None:
        pid = self._pid(s.node)
        if s.rank is not None:
            label = f"rank {s.rank}"
        else:
            label = s.service or (f"infra {s.irank}" if s.irank is not None else f"pid {s.pid}")
        other = ("infra", s.irank) if s.irank is not None else ("pid", s.pid)
        tid = self._tid(pid, s.rank, other, label)
        ts = _us(s.start_ns)
        args: dict[str, Any] = dict(s.attrs)
        args.update(trace_id=s.trace_id, span_id=s.span_id, parent_id=s.parent_id)
        if s.error:
            args["status"] = f"ERROR {s.status}".strip()
        self._emit(
            {
                "name": s.name,
                "cat": s.scope or "span",
                "ph": "X",
                "ts": ts,
                "dur": _us(s.duration_ns),
                "pid": pid,
                "tid": tid,
                "args": args,
            }
        )
        here: Position = (pid, tid, ts)
        if s.span_id is not None:
            self.spans[s.span_id] = here
            if len(self.spans) > SPANS_KEPT:
                self.spans.popitem(last=False)
            for flow, linking in self.waiting.pop(s.span_id, ()):
                self._flow(flow, here, linking)
        for _, target in s.links:
            self.flows += 1
            known = self.spans.get(target)
            if known is not None:
                self._flow(self.flows, known, here)
                continue
            self.waiting.setdefault(target, []).append((self.flows, here))
            if len(self.waiting) > SPANS_KEPT:
                _, dropped = self.waiting.popitem(last=False)
                self.unmatched += len(dropped)

    def _flow(self, flow: int, source: Position, dest: Position) -> None:
        for ph, (pid, tid, ts) in (("s", source), ("f", dest)):
            event: dict[str, Any] = {
                "name": "link",
                "cat": "link",
                "ph": ph,
                "id": flow,
                "ts": ts,
                "pid": pid,
                "tid": tid,
            }
            if ph == "f":
                event["bp"] = "e"
            self._emit(event)

    def close(self) -> None:
        """Write the track names and end the document (links whose span never came are
        left out)."""
        for event in self.names:
            self._emit(event)
        self.unmatched += sum(len(v) for v in self.waiting.values())
        self.waiting.clear()
        self.out.write(b"\n]}\n")
        self.out.flush()
