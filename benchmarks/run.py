"""Run the benchmarks side by side in one run and print a table; ``--json PATH`` saves it.

    python -m benchmarks.run [--only logging,aggregator] [--json out.json] [--quick]

Speed targets are ratios against peers measured in the same run, never absolute times:
this machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson


def _logging(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_logging

    return bench_logging.run(calls=10_000 if quick else 50_000, rounds=3 if quick else 7)


def _tracing(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_tracing

    return bench_tracing.run(calls=5_000 if quick else 20_000, rounds=3 if quick else 7)


def _loguru(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_loguru

    return bench_loguru.run(calls=500 if quick else 2_000, rounds=5 if quick else 21)


def _aggregator(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_aggregator

    result: dict[str, Any] = bench_aggregator.run(20_000 if quick else 200_000)
    return result


def _otlp(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_otlp

    return bench_otlp.run(
        records=5_000 if quick else 20_000, records_per_rank=5_000 if quick else 50_000
    )


def _catchup(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_catchup

    return bench_catchup.run(20_000 if quick else 200_000, repeats=1 if quick else 3)


def _latency(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_latency

    return bench_latency.run(seconds=2.0 if quick else 5.0)


def _scale(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_scale

    if quick:
        return bench_scale.run(
            records_per_rank=500, rank_counts=bench_scale.QUICK_RANK_COUNTS, repeats=1
        )
    return bench_scale.run()  # both paths, 8 to 512 ranks, 3 repeats: 6-7 minutes on 2 cores


def _dedup(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_dedup

    if quick:
        return bench_dedup.run(records_per_rank=2_000, storm_steps=10, rounds=1)
    return bench_dedup.run()


def _capture(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_capture

    return bench_capture.run(lines=20_000 if quick else 200_000, rounds=3 if quick else 5)


def _logs_view(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_logs_view

    return bench_logs_view.run(100_000 if quick else 1_000_000)


def _report(quick: bool) -> dict[str, Any]:
    from benchmarks import bench_report

    return bench_report.run(100_000 if quick else 1_000_000)


SUITES: dict[str, Callable[[bool], dict[str, Any]]] = {
    "logging": _logging,
    "loguru": _loguru,
    "tracing": _tracing,
    "aggregator": _aggregator,
    "otlp": _otlp,
    "catchup": _catchup,
    "latency": _latency,
    "scale": _scale,
    "logs_view": _logs_view,
    "report": _report,
    "dedup": _dedup,
    "capture": _capture,
}


def _print(name: str, result: dict[str, Any]) -> None:
    print(f"\n== {name}")
    for section, values in result.items():
        if isinstance(values, dict):
            print(f"  {section}:")
            targets = result.get("targets", {}) if section == "ratios" else {}
            for key, value in values.items():
                shown = f"{value:,.3f}" if isinstance(value, float) else f"{value}"
                mark = ""
                if key in targets:
                    mark = "  ok" if value <= targets[key] else f"  (target <= {targets[key]})"
                print(f"    {key:34s} {shown}{mark}")
        else:
            print(f"  {section:36s} {values}")


def main(argv: list[str] | None = None) -> int:
    import os

    # No watcher in this process: suites delete their spools while it would still write
    # there. bench_capture starts the ranks it measures with their own settings.
    os.environ.setdefault("NVRX_OTEL_CAPTURE_OUTPUT", "off")
    os.environ.setdefault("NVRX_OTEL_CAPTURE_STACKS", "off")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated suites")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s): {', '.join(unknown)} (known: {', '.join(SUITES)})")
    results = {}
    for name in chosen:
        results[name] = SUITES[name](args.quick)
        _print(name, results[name])
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
