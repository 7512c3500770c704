"""Stragglers: per phase, the ranks whose mean duration of that phase exceeds
:data:`RATIO` times the median of all ranks' means, and by at least :data:`MIN_EXCESS_S`
(so microsecond phases do not flag noise). A phase needs spans from :data:`MIN_RANKS`
ranks or more to have a median worth comparing with. The median is the middle value (the
mean of the two middle ones for an even count). Processes without a workload rank (the
launcher's spans) count in the phase table, not here.
"""

from __future__ import annotations

import statistics
from typing import Final

from nvrx_otel.report.model import Straggler
from nvrx_otel.report.phases import NS, RankPhase

RATIO: Final = 1.5
"""A rank is a straggler in a phase when its mean duration is over 1.5x the median."""
MIN_EXCESS_S: Final = 0.01
"""... and over the median by at least 10 ms."""
MIN_RANKS: Final = 3


def stragglers(
    per_rank: dict[str, dict[int, RankPhase]],
    ratio: float = RATIO,
    min_excess_s: float = MIN_EXCESS_S,
) -> list[Straggler]:
    """The stragglers of every phase, the slowest (by ratio) first."""
    out = []
    for phase, ranks in per_rank.items():
        if len(ranks) < MIN_RANKS:
            continue
        means = {r: rp.total_ns / rp.count for r, rp in ranks.items()}
        median = statistics.median(means.values())
        for rank, mean in means.items():
            if mean > ratio * median and (mean - median) / NS >= min_excess_s:
                rp = ranks[rank]
                out.append(
                    Straggler(
                        phase=phase,
                        rank=rank,
                        node=rp.node,
                        mean_s=mean / NS,
                        median_s=median / NS,
                        ratio=mean / median if median else float("inf"),
                        max_s=rp.max_ns / NS,
                        count=rp.count,
                    )
                )
    out.sort(key=lambda s: (-s.ratio, s.phase, s.rank))
    return out
