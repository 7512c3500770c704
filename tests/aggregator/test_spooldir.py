"""The aggregator reads only its own user's files in the job directory.

A file of another user under a spool file's name (planted by ``nobody`` while the job
directory was writable by others) is said once on stderr and never read: its lines could
claim any rank and level. Likewise another user's drop ledger or loss tally is never
reported or deleted. The aggregator runs as root here, so it reads root's files only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvrx_otel import record as rec
from nvrx_otel.spool import sidecar
from nvrx_otel.spool.paths import SpoolFileName
from nvrx_otel.spool.writer import SpoolWriter
from tests.aggregator.spoolkit import NODE, config, log_lines, log_path, running, wait_for
from tests.conftest import as_nobody


def _forged_spool_file() -> bytes:
    """A well-formed spool file of a made-up writer holding one forged ERROR record."""
    writer = "00000000000000ee"
    header = {"v": 1, "k": "hdr", "w": writer, "f": 0, "ts": 1, "pid": 7, "ppid": 1}
    header.update({"proc": "rank0", "res": {}})
    record = {"v": 1, "k": "log", "ts": 2, "sev": 17, "lvl": "ERROR", "lg": "t"}
    record.update({"msg": "FORGED checkpoint corrupt, delete it", "key": f"{writer}-0"})
    record.update({"pid": 7, "node": NODE, "rank": 0, "lrank": 0, "irank": 0, "ilrank": 0})
    return rec.encode(header) + rec.encode(record)


def test_a_spool_file_planted_by_another_user_is_not_read(
    shared_tmp: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``nobody`` plants a spool file and a drop ledger while the job directory is 0777;
    the directory is then made 0700 again and the aggregator started: the forged record
    is not in the node log, the real one is, each planted file is said once, and they stay
    where they are (not deleted)."""
    job = shared_tmp / "spool" / "job1"
    job.mkdir(parents=True, mode=0o700)
    job.chmod(0o777)
    name = SpoolFileName("00000000000000ee", 0, 7, "rank0").name
    as_nobody("sh", "-c", f"cat > {job / name}", stdin=_forged_spool_file())
    ledger = job / sidecar.ledger_name("rank0", 7, "00000000000000ef")
    fake = sidecar._FIELDS.pack(sidecar.MAGIC, 5000, 0, 0, 0, 1, 2, 0, 0, 0, 7, b"budget")
    as_nobody("sh", "-c", f"cat > {ledger}", stdin=fake.ljust(sidecar.SIZE, b"\0"))
    job.chmod(0o700)  # the operator closes the directory; the planted files remain
    assert (job / name).stat().st_uid == 65534
    with running(config(shared_tmp)):
        for msg in ("real one", "real two"):  # scans go by between them: still said once
            w = SpoolWriter(job)
            w.emit({"k": "log", "ts": 3, "sev": 9, "lvl": "INFO", "lg": "t", "msg": msg})
            w.close()
            wait_for(lambda m=msg: any(m in line for line in log_lines(log_path(shared_tmp))))
    text = log_path(shared_tmp).read_text()
    assert "FORGED" not in text and "[ERROR]" not in text
    assert "dropped 5000" not in text
    err = capfd.readouterr().err
    assert err.count(f"ignoring spool file {name}: owned by uid 65534") == 1, err
    assert err.count(f"ignoring {ledger.name}: owned by uid 65534") == 1, err
    assert (job / name).exists() and ledger.exists()
    assert os.stat(job / name).st_uid == 65534
