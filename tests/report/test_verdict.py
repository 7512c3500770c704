"""The verdict, the report's first line: worked out by hand for the jobs of
test_failures.py, and first in the text, the page and the JSON."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from nvrx_otel.report.html import page
from nvrx_otel.report.render import json_text, write_text
from nvrx_otel.report.timeline import Timeline
from tests.report.otlpkit import at, log
from tests.report.test_failures import _job, _stopped


def test_a_failure_names_the_rank_what_when_and_the_victims(tmp_path: Path) -> None:
    by_rank: dict[int, list[dict[str, Any]]] = {r: [log(at(0), "start"), *_stopped(10.5)]
                                               for r in (0, 1, 3)}  # fmt: skip
    by_rank[2] = [log(at(0), "start"), log(at(12.3), "loss is NaN", "ERROR")]
    r = _job(tmp_path, by_rank)
    assert r.verdict == (
        "FAILED: rank 2 (n0) loss is NaN in cycle 0 at +12.3 s; the launcher stopped "
        "ranks 0-1,3. 11 records, none lost."
    )
    out = io.StringIO()
    write_text(r, out)
    assert out.getvalue().startswith(r.verdict[:40])
    assert orjson.loads(json_text(r))["verdict"] == r.verdict
    html = page(r, Timeline())
    assert html.index("FAILED: rank 2") < html.index("<h2>")


def test_a_hang_says_hung_and_names_the_ranks_that_waited(tmp_path: Path) -> None:
    by_rank: dict[int, list[dict[str, Any]]] = {
        r: [log(at(20), "Timed out waiting 5000ms", "ERROR")] for r in (0, 2, 3)
    }
    by_rank[1] = [log(at(3), "step 3"), *_stopped(21, line=31)]
    r = _job(tmp_path, by_rank)
    (h,) = r.hung
    assert (h.rank, h.cycle, h.waited_by, h.waiting, h.stack) == (1, 0, [0, 2, 3], 3, "train.py:31")
    assert orjson.loads(json_text(r))["hung"][0]["waited_by"] == [0, 2, 3]
    assert r.verdict == (
        "HUNG: rank 1 (n0) did not fail while ranks 0,2-3 failed in a collective; its stack "
        "at SIGTERM ends in train.py:31 in cycle 0 at +18.0 s. 6 records, none lost."
    )


def test_losses_the_ledger_reported_are_in_the_verdict(tmp_path: Path) -> None:
    by_rank = {0: [log(at(0), "step 0"), log(at(1), "step 1")]}
    loss = log(at(2), "dropped 40 records from rank 0 (pid 7): spool_full", "WARNING",
               **{"nv.nvrx.drop.count": 40, "nv.nvrx.drop.reason": "spool_full"})  # fmt: skip
    by_rank[0].append(loss)
    r = _job(tmp_path, by_rank)
    assert r.verdict == "OK: 1 rank, no failure. 3 records, 40 dropped reported lost."
