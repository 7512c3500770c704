"""The loop reads each spool byte once and hands the batch to every sink; a sink that lags
reads from its own cursor until it has caught up, and the node log never waits for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvrx_otel import semconv
from nvrx_otel.aggregator import otlp_export
from nvrx_otel.spool.writer import SpoolWriter
from tests.aggregator.spoolkit import config, log_path, messages, running, spool_dir, wait_for
from tests.otlp_receiver import OtlpReceiver

WRITERS = 3
RECORDS = 1000


def _write(tmp: Path) -> None:
    directory = spool_dir(tmp)
    directory.mkdir(parents=True, exist_ok=True)
    for w in range(WRITERS):
        writer = SpoolWriter(directory, max_file_size=64 << 10, budget=64 << 20)
        for i in range(RECORDS):
            writer.emit({"k": "log", "ts": 1_700_000_000_000_000_000 + i, "sev": 9,
                         "lvl": "INFO", "lg": "t", "msg": f"rec {w} {i}"})  # fmt: skip
        writer.close()


def _unique(r: OtlpReceiver) -> int:
    """Writer records the receiver has, duplicates (a batch sent twice) counted once."""
    return len(
        {
            log["attributes"][semconv.RECORD_KEY]
            for log in r.logs
            if str(log["body"]).startswith("rec ")
        }
    )


def _node_log(tmp: Path) -> int:
    return sum(1 for m in messages(log_path(tmp)) if m.startswith("rec "))


def test_otlp_takes_the_node_logs_batches_without_reading_the_spool_again(
    tmp_path: Path,
) -> None:
    _write(tmp_path)
    receiver = OtlpReceiver()
    with receiver, running(config(tmp_path, otlp_endpoint=receiver.endpoint)) as agg:
        wait_for(lambda: _node_log(tmp_path) == WRITERS * RECORDS, timeout=60, what="log")
        assert receiver.wait_for(lambda r: _unique(r) >= WRITERS * RECORDS, timeout=60)
        export = agg._otlp
        assert export is not None
        assert export.reads == 0  # every byte was read and decoded once, by the loop
    assert _unique(receiver) == WRITERS * RECORDS


def test_a_lagging_otlp_sink_catches_up_from_its_own_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint refuses while the node log reads everything: OTLP's queue holds only a
    few batches, so it falls behind, then reads the rest itself once the endpoint is back."""
    monkeypatch.setattr(otlp_export, "QUEUE_RECORDS", 50)
    _write(tmp_path)
    with OtlpReceiver() as receiver:
        receiver.status = 503
        with running(config(tmp_path, otlp_endpoint=receiver.endpoint)) as agg:
            wait_for(lambda: _node_log(tmp_path) == WRITERS * RECORDS, timeout=60, what="log")
            receiver.status = 200
            assert receiver.wait_for(lambda r: _unique(r) >= WRITERS * RECORDS, timeout=90)
            export = agg._otlp
            assert export is not None
            assert export.reads > 0 and export.dropped == 0
    assert _unique(receiver) == WRITERS * RECORDS


def test_health_metrics_start_once_caught_up_not_during_the_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Setting up the metrics exporter costs CPU a catch-up needs: the metrics start once
    the node log and OTLP have both caught up (long before their interval is due)."""
    from nvrx_otel.aggregator import otlp_metrics

    monkeypatch.setattr(otlp_metrics, "export_interval", lambda status_interval: 300.0)
    _write(tmp_path)
    with OtlpReceiver() as receiver:
        receiver.status = 503  # OTLP cannot catch up meanwhile
        with running(config(tmp_path, otlp_endpoint=receiver.endpoint)) as agg:
            wait_for(lambda: _node_log(tmp_path) == WRITERS * RECORDS, timeout=60, what="log")
            assert agg._metrics is None  # the node log has caught up, OTLP has not
            receiver.status = 200
            wait_for(lambda: agg._metrics is not None, timeout=60, what="the metrics started")
            assert receiver.wait_for(lambda r: _unique(r) >= WRITERS * RECORDS, timeout=60)


def _json_records(directory: Path) -> int:
    keys = set()
    for path in directory.glob("logs_*.jsonl"):
        # only whole lines: the sink may be writing the last one while the test reads
        for line in path.read_text().split("\n")[:-1]:
            for rl in json.loads(line)["resourceLogs"]:
                for sl in rl["scopeLogs"]:
                    for r in sl["logRecords"]:
                        if r["body"].get("stringValue", "").startswith("rec "):
                            keys.add(json.dumps(r["attributes"], sort_keys=True))
    return len(keys)


def test_otlp_json_files_keep_flowing_while_the_endpoint_is_down(tmp_path: Path) -> None:
    """The endpoint and the OTLP/JSON files are two sinks with their own cursors: one that
    refuses holds back neither the node log nor the other."""
    _write(tmp_path)
    receiver = OtlpReceiver()
    out = tmp_path / "json"
    with receiver:
        receiver.status = 503
        cfg = config(tmp_path, otlp_endpoint=receiver.endpoint, otlp_json=out)
        with running(cfg):
            wait_for(lambda: _node_log(tmp_path) == WRITERS * RECORDS, timeout=60, what="log")
            wait_for(lambda: _json_records(out) == WRITERS * RECORDS, timeout=60, what="json")
            assert _unique(receiver) == 0
            receiver.status = 200
            assert receiver.wait_for(lambda r: _unique(r) >= WRITERS * RECORDS, timeout=90)
    assert _json_records(out) == WRITERS * RECORDS


def test_otlp_json_directory_removed_while_in_use_is_made_again(tmp_path: Path) -> None:
    """A cleanup job removes the OTLP/JSON directory under a running aggregator: the
    records that come after are in a file at the same place, not retried for ever."""
    import shutil

    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "json"
    writer = SpoolWriter(directory, max_file_size=64 << 10, budget=64 << 20)

    def log(start: int) -> None:
        for i in range(start, start + 100):
            writer.emit({"k": "log", "ts": 1_700_000_000_000_000_000 + i, "sev": 9,
                         "lvl": "INFO", "lg": "t", "msg": f"rec 0 {i}"})  # fmt: skip

    with running(config(tmp_path, otlp_json=out)):
        log(0)
        wait_for(lambda: _json_records(out) == 100, timeout=60, what="the first 100")
        shutil.rmtree(out)
        log(100)
        wait_for(lambda: _json_records(out) == 100, timeout=60, what="the next 100, anew")
        writer.close()


def test_otlp_json_line_written_in_part_is_cut_off(tmp_path: Path) -> None:
    """The disk fills in the middle of an OTLP/JSON line (here the file size limit): the
    request is retried, and the file holds no half line meanwhile."""
    import resource
    import signal

    from nvrx_otel.aggregator.otlp_delivery import JsonLines
    from nvrx_otel.aggregator.otlp_encode import encode_logs
    from nvrx_otel.aggregator.otlp_transport import Result

    sink = JsonLines(tmp_path / "json", "n")
    records = [{"v": 1, "k": "log", "ts": 1_700_000_000_000_000_000, "sev": 9, "lvl": "INFO",
                "lg": "t", "msg": "x" * 5000, "key": f"k-{i}"} for i in range(4)]  # fmt: skip
    message = encode_logs([({}, records)], 0)
    assert sink.deliver("logs", message, b"", 1.0) is Result.OK
    whole = sink.paths["logs"].read_bytes()
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(whole) + 4096, limits[1]))
    try:
        assert sink.deliver("logs", message, b"", 1.0) is Result.RETRY
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert sink.paths["logs"].read_bytes() == whole  # no half line left behind
    assert sink.deliver("logs", message, b"", 1.0) is Result.OK
    assert sink.paths["logs"].read_bytes() == whole * 2


def test_requests_stay_under_a_collectors_default_message_size(tmp_path: Path) -> None:
    """Twelve records of 900 KB (under the record cap): no request may carry them all, or
    a collector's OTLP/gRPC receiver (4 MiB messages by default) refuses it for good."""
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    writer = SpoolWriter(directory, max_file_size=32 << 20, budget=256 << 20)
    for i in range(12):
        writer.emit({"k": "log", "ts": 1_700_000_000_000_000_000 + i, "sev": 9,
                     "lvl": "INFO", "lg": "t", "msg": f"rec {i} " + "x" * 900_000})  # fmt: skip
    writer.close()
    receiver = OtlpReceiver()
    receiver.status = 503  # down while the node log takes them all: OTLP catches up later
    with receiver, running(config(tmp_path, otlp_endpoint=receiver.endpoint)):
        wait_for(lambda: _node_log(tmp_path) == 12, timeout=60, what="the node log")
        receiver.status = 200
        assert receiver.wait_for(lambda r: _unique(r) >= 12, timeout=60)
    assert _unique(receiver) == 12
    assert max(receiver.sizes) < 4 << 20, receiver.sizes


def test_malformed_headers_are_named_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OTel's header parser logs a malformed header with its value (a token): the
    aggregator swallows that and says which variable dropped its headers, once."""
    from nvrx_otel.aggregator.sinks import build_sinks

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer TOPSECRET")
    build_sinks(config(tmp_path), "n0")
    err = capsys.readouterr().err
    assert "TOPSECRET" not in err
    assert err.count("OTEL_EXPORTER_OTLP_HEADERS is malformed: headers are dropped") == 1
