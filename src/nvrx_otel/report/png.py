"""``--png``: a per-rank timeline (matplotlib, the ``plot`` extra).

One row per workload rank (rank 0 at the top), time in seconds since the first record.
Spans of the conventions are bars coloured by group (a truncated span hatched), a
cycle's first failure a red cross at its time, a restart a dashed line, a silent rank a
grey band from its last record to the end of its cycle, a straggler's row label bold
orange. Without matplotlib :class:`MissingMatplotlib` says how to install it.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from nvrx_otel import semconv
from nvrx_otel.nodeline import ranges
from nvrx_otel.report.model import Report
from nvrx_otel.report.timeline import TRUNCATED, Timeline

GROUP_COLOURS: Final = {
    semconv.SPAN_GROUP_CKPT: "#4c72b0",
    semconv.SPAN_GROUP_CKPT_PHASES: "#55a868",
    semconv.SPAN_GROUP_FT: "#8172b2",
    semconv.SPAN_GROUP_STARTUP: "#ccb974",
}
USER_COLOUR: Final = "#dd8452"
"""The program's own spans (names not of the conventions)."""
_LONG: Final = frozenset({semconv.SPAN_FTL_RUN, semconv.SPAN_FTL_CYCLE})
"""Spans that last the whole run: drawn thin behind the others."""


LABELS_MAX: Final = 64
"""Rows labelled at most (and every straggler's); more ranks label every n-th row."""


class MissingMatplotlib(RuntimeError):
    """matplotlib is not installed (the message is the one line to show)."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingMatplotlib(
            f"the picture needs matplotlib: {sys.executable} -m pip install matplotlib"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(report: Report, timeline: Timeline, path: str) -> None:
    """Write the timeline picture of ``report`` to ``path`` (PNG)."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    ranks = sorted(set(timeline.nodes) | {q.rank for q in report.silent} | _failing(report))
    start = report.start_ns or 0
    end = report.end_ns or start
    rows = {rank: i for i, rank in enumerate(ranks)}
    height = min(40.0, 1.5 + 0.3 * max(1, len(ranks)))
    fig, ax = plt.subplots(figsize=(12, height), dpi=100)
    try:
        _bars(ax, timeline, ranks, start)
        for q in report.silent:
            cycle_end = next((c.end_ns for c in report.cycles if c.cycle == q.cycle), end)
            y = rows[q.rank]
            ax.broken_barh(
                [((q.last_ns - start) / 1e9, max((cycle_end - q.last_ns) / 1e9, 1e-6))],
                (y - 0.45, 0.9),
                facecolors="#bbbbbb",
                alpha=0.6,
            )
            ax.text((q.last_ns - start) / 1e9, y, " silent", va="center", fontsize=8)
        for c in report.cycles[1:]:
            x = (c.start_ns - start) / 1e9
            ax.axvline(x, color="black", linestyle="--", linewidth=0.8)
            ax.text(x, -0.5, f" cycle {c.cycle}", va="bottom", fontsize=8)
        for f in _failures(report):
            ax.plot([(f.ts_ns - start) / 1e9], [rows[f.rank]], "x", color="red", ms=10, mew=2)
        slow = {s.rank for s in report.stragglers}
        step = max(1, len(ranks) // LABELS_MAX)  # label every rank, or every step-th
        shown = [i for i in range(len(ranks)) if i % step == 0 or ranks[i] in slow]
        ax.set_yticks(shown)
        ax.set_yticklabels([f"rank {ranks[i]}" for i in shown], fontsize=8 if step > 1 else None)
        for label, i in zip(ax.get_yticklabels(), shown, strict=True):
            if ranks[i] in slow:
                label.set_color("darkorange")
                label.set_fontweight("bold")
        ax.set_ylim(max(1, len(ranks)) - 0.5, -0.5)
        if not ranks:
            ax.text(0.5, 0.5, "no records of workload ranks", transform=ax.transAxes, ha="center")
        ax.set_xlim(0, max((end - start) / 1e9, 1e-3) * 1.02)
        ax.set_xlabel("seconds since the first record")
        ax.grid(axis="x", alpha=0.3)
        handles = [Patch(color=c, label=g) for g, c in GROUP_COLOURS.items()]
        handles.append(Patch(color=USER_COLOUR, label="other spans"))
        handles.append(Patch(color="#bbbbbb", label="silent"))
        ax.legend(handles=handles, loc="upper right", fontsize=7)
        ax.set_title(_title(report), fontsize=10)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _bars(ax: Any, timeline: Timeline, ranks: list[int], start: int) -> None:
    """Every rank's bars, as one collection per look (colour, thin or not, truncated or
    not): a few artists however many bars."""
    from matplotlib.collections import PolyCollection

    looks: dict[tuple[str, bool, bool], list[list[tuple[float, float]]]] = {}
    for y, rank in enumerate(ranks):
        for s, e, code in timeline.bars(rank):
            name = timeline.names[code & 0xFF]
            spec = semconv.SPANS.get(name)
            colour = GROUP_COLOURS.get(spec.group, "#999999") if spec else USER_COLOUR
            thin = name in _LONG
            x0, x1 = (s - start) / 1e9, max((e - start) / 1e9, (s - start) / 1e9 + 1e-6)
            half = 0.1 if thin else 0.35 if spec else 0.25  # the program's: nested, see-through
            box = [(x0, y - half), (x1, y - half), (x1, y + half), (x0, y + half)]
            looks.setdefault((colour, thin, bool(code & TRUNCATED)), []).append(box)
    for (colour, thin, truncated), boxes in looks.items():
        ax.add_collection(
            PolyCollection(
                boxes,
                facecolors=colour,
                alpha=0.35 if thin else 0.55 if colour == USER_COLOUR else 0.9,
                hatch="//" if truncated else None,
                edgecolors="black" if truncated or colour == USER_COLOUR else colour,
                linewidths=0.3,
            )
        )


def _failures(report: Report) -> list[Any]:
    out = [c.first_failure for c in report.cycles if c.first_failure is not None]
    if report.first_failure is not None:
        out.append(report.first_failure)
    return out


def _failing(report: Report) -> set[int]:
    return {f.rank for f in _failures(report)}


def _title(report: Report) -> str:
    parts = [f"{report.ranks} ranks, {len(report.nodes)} nodes"]
    head = report.verdict.partition(":")[0] or "first failure"
    if report.hung:
        parts.append(f"{head}: rank " + ", ".join(str(h.rank) for h in report.hung))
    elif report.first_failure is not None:
        parts.append(f"{head}: rank {report.first_failure.rank} (x)")
    if report.stopped:
        parts.append(f"stopped by the launcher: {ranges(report.stopped)}")
    if report.silent:
        parts.append("silent: " + ", ".join(str(s.rank) for s in report.silent))
    if report.stragglers:
        parts.append("stragglers: " + ", ".join(sorted({str(s.rank) for s in report.stragglers})))
    return "; ".join(parts)
