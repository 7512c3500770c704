"""Under spool-budget pressure the OTLP backlog gives way, never the node log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvrx_otel import semconv
from tests.aggregator.spoolkit import NO_WATCHER, wait_for
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
RANK = (
    "import time\n"
    "from nvrx_otel.logging import setup_logger\n"
    "log = setup_logger()\n"
    "for i in range(600):\n"
    "    log.info('record %04d %s', i, 'x' * 200)\n"
    "    time.sleep(0.02)\n"
)


def test_otlp_backlog_is_dropped_first_and_reported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RANK", "NVRX_"))}
    env.update(NO_WATCHER)
    env.update(
        NVRX_NODE_LOCAL_TMPDIR=str(tmp_path / "spool"),
        NVRX_OTEL_NODE_ID="n1",
        RANK="0",
        PYTHONPATH=str(ROOT),
        # 4 KiB files (about 9 records), a budget of 40 of them: less than the whole run
        # (about 65 files), more than what the writer fills while its older files settle
        # (a file is final 2 s after the next one appears; 2 s here is about 11 files)
        NVRX_LOG_MAX_FILE_SIZE_KB="4",
        NVRX_LOG_MAX_LOG_FILES="40",
        NVRX_OTEL_SPOOL_SCALE="1",
    )
    with OtlpReceiver() as receiver:
        receiver.status = 503  # the endpoint refuses: the OTLP backlog grows
        agg = spawn(
            [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
             str(tmp_path / "logs"), "--wait-file", str(tmp_path / "wait"),
             "--check-interval", "0.05", "--otlp-endpoint", receiver.endpoint],
            env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        rank = spawn([sys.executable, "-c", RANK], env=env)
        assert rank.wait(timeout=120) == 0
        node_log = tmp_path / "logs" / "nvrx_log_n1.log"

        def in_node_log() -> int:
            text = node_log.read_text() if node_log.exists() else ""
            return text.count(" record ") + text.count("dropped ")

        wait_for(lambda: in_node_log() >= 600, 60, "every record in the node log")
        receiver.status = 200
        written = node_log.read_text().count(" record ")

        def accounted() -> bool:  # OTLP has delivered or reported every node-log record
            with receiver.lock:
                logs = {log["attributes"][semconv.RECORD_KEY]: log for log in receiver.logs}
            delivered = sum(1 for log in logs.values() if log["body"].startswith("record "))
            skipped = sum(
                log["attributes"][semconv.DROP_COUNT]
                for log in logs.values()
                if log["attributes"].get(semconv.DROP_REASON) == "otlp_backlog"
            )
            return skipped > 0 and delivered + skipped >= written

        wait_for(accounted, 60, "OTLP to deliver or report every record")
        (tmp_path / "wait").touch()
        _, err = agg.communicate(timeout=90)
        assert agg.returncode == 0, err
        logs = {log["attributes"][semconv.RECORD_KEY]: log for log in receiver.logs}
    text = node_log.read_text()
    written = text.count(" record ")
    writer_dropped = sum(
        int(line.split("dropped ")[1].split()[0])
        for line in text.splitlines()
        if "dropped " in line
    )
    assert written + writer_dropped == 600  # the node log accounts for every record
    assert writer_dropped == 0, err  # OTLP gave way: the writer never hit its budget
    delivered = [log for log in logs.values() if log["body"].startswith("record ")]
    reports = [
        log for log in logs.values() if log["attributes"].get(semconv.DROP_REASON) == "otlp_backlog"
    ]
    skipped = sum(r["attributes"][semconv.DROP_COUNT] for r in reports)
    assert skipped > 0 and "OTLP backlog: skipped" in err
    assert len(delivered) + skipped == written, err  # OTLP accounts for every node-log record


def test_spool_file_is_deletable_only_past_a_committed_otlp_cursor() -> None:
    """The OTLP thread moves its cursor (a delivery, or a backlog skip with its report)
    between two commits; a spool file deleted on that cursor and an aggregator killed
    before the next commit would lose the file's records unreported. Deletion follows the
    cursor as last committed."""
    from nvrx_otel.aggregator.otlp_export import OtlpExport
    from nvrx_otel.aggregator.otlp_files import new_cursor
    from nvrx_otel.spool.paths import SpoolFileName

    parts = SpoolFileName("00000000000000a1", 0, 4242, "rank0")
    export = OtlpExport(on_report=lambda _: None)
    cursor = export.cursors[parts.name] = new_cursor(parts.name, parts, 77)
    cursor.offset = 4096  # exported (or skipped) to the end, not yet committed
    assert not export.consumed(parts.name, 77, 4096)
    export.state()  # handed to a commit that fails: still not deletable
    assert not export.consumed(parts.name, 77, 4096)
    export.state()
    export.committed()
    assert export.consumed(parts.name, 77, 4096)
    assert not export.consumed(parts.name, 78, 4096)  # another file under the name
    restored = OtlpExport(on_report=lambda _: None)
    restored.restore(export.state())
    assert restored.consumed(parts.name, 77, 4096)
