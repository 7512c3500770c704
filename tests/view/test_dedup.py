"""De-duplication: counts, rank ranges, the window's edges, what never collapses."""

from __future__ import annotations

from nvrx_otel.view.dedup import dedup, ranges
from nvrx_otel.view.entry import Loss
from tests.view.viewkit import entry

S = 1_000_000_000


def _shown(entries: list) -> list[tuple[str, int, str]]:
    return [(g.entry.text, g.count, g.summary()) for g in dedup(entries, window_ns=2 * S)]


def test_same_message_from_many_ranks_collapses_with_count_and_ranks() -> None:
    entries = [entry(i * 1000, "loss 0.5", rank=r) for i, r in enumerate([*range(128)])]
    assert _shown(entries) == [("loss 0.5", 128, "repeated 128x across ranks 0-127")]


def test_rank_lists_infra_ranks_nodes_and_one_rank() -> None:
    assert ranges([7, 0, 1, 2, 3, 9, 10]) == "0-3,7,9-10"
    mixed = [
        entry(1, "x", rank=0),
        entry(2, "x", rank=2),
        entry(3, "x", rank=None, irank=5),
        entry(4, "x", rank=None, irank=None, node="m"),
    ]
    assert _shown(mixed) == [("x", 4, "repeated 4x across ranks 0,2, infra rank 5, ? on 2 nodes")]
    same = [entry(i, "y", rank=3) for i in range(5)]
    assert _shown(same) == [("y", 5, "repeated 5x from rank 3")]


def test_window_edges_join_at_exactly_the_window_and_split_after() -> None:
    entries = [
        entry(0, "tick", rank=0),
        entry(2 * S, "tick", rank=1),
        entry(2 * S + 1, "tick", rank=2),
    ]
    assert _shown(entries) == [("tick", 2, "repeated 2x across ranks 0-1"), ("tick", 1, "")]


def test_no_collapse_across_different_messages_or_levels() -> None:
    entries = [
        entry(0, "a", rank=0),
        entry(1, "b", rank=1),
        entry(2, "a", rank=2, level="ERROR"),
        entry(3, "a", rank=3),
        entry(4, "a\nmore", rank=4),
    ]
    assert _shown(entries) == [
        ("a", 2, "repeated 2x across ranks 0,3"),
        ("b", 1, ""),
        ("a", 1, ""),
        ("a\nmore", 1, ""),
    ]


def test_groups_keep_the_time_order_of_their_first_record() -> None:
    entries = [
        entry(0, "a", rank=0),
        entry(S, "b", rank=0),
        entry(S + 1, "a", rank=1),
        entry(5 * S, "c"),
    ]
    assert [t for t, _, _ in _shown(entries)] == ["a", "b", "c"]


def test_loss_reports_never_collapse() -> None:
    loss = Loss("dropped", 3, "budget")
    entries = [entry(0, "dropped 3", loss=loss, rank=r) for r in range(3)]
    assert [c for _, c, _ in _shown(entries)] == [1, 1, 1]
