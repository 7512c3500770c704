"""The README's quickstart, run as written: its ``train.py`` under a stand-in for torchrun
(eight ranks of the real one would take minutes here; tests/torch/ runs it) that starts
the ranks as torchrun does — ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE`` and ``TORCHELASTIC_RUN_ID`` from ``--rdzv-id``, or a random one for
``--standalone`` — under ``nvrx-otel run``, then the log view, the report, the demo and
its picture."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TORCHRUN = r"""#!/usr/bin/env bash
# stand-in torchrun: its environment for its workers; flags as the README uses them
n=1 run=none
while [[ $1 == --* ]]; do
  case $1 in
    --nproc-per-node) n=$2; shift 2 ;;
    --rdzv-id) run=$2; shift 2 ;;
    --standalone) run=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n'); shift ;;  # random
    *) echo "stand-in torchrun: unknown flag $1" >&2; exit 2 ;;
  esac
done
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n GROUP_RANK=0 \
    TORCHELASTIC_RUN_ID=$run TORCHELASTIC_RESTART_COUNT=0 python "$@" & pids+=($!)
done
rc=0
for r in "${pids[@]}"; do wait "$r" || rc=1; done
exit $rc
"""


def quickstart() -> tuple[str, str]:
    """The quickstart's python block (``train.py``) and its bash block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    python = re.search(r"```python\n(.*?)```", section, re.S)
    bash = re.search(r"```bash\n(.*?)```", section, re.S)
    assert python and bash, "README: the quickstart needs a python and a bash block"
    return python.group(1), bash.group(1)


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    train, commands = quickstart()
    assert commands.count("\n") <= 30
    (tmp_path / "train.py").write_text(train)
    bindir = Path(sys.executable).parent
    stand_in = tmp_path / "bin" / "torchrun"
    stand_in.parent.mkdir()
    stand_in.write_text(TORCHRUN)
    stand_in.chmod(0o755)
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "LOCAL_", "WORLD", "SLURM_", "TORCHELASTIC", "NVRX_"))
    }
    environ["PATH"] = f"{stand_in.parent}{os.pathsep}{bindir}{os.pathsep}{environ.get('PATH', '')}"
    environ["NVRX_OTEL_NODE_ID"] = "node007"
    environ["TMPDIR"] = str(tmp_path)  # the spool root nvrx-otel run picks
    proc = subprocess.run(
        ["bash", "-uc", commands], cwd=tmp_path, env=environ, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    out = proc.stdout
    node_log = (tmp_path / "runs" / "run1" / "logs" / "nvrx_log_node007.log").read_text()
    steps = re.findall(r"\[workload:(\d)\(\d\) .*step 10 loss 0\.420$", node_log, re.M)
    assert sorted(map(int, steps)) == list(range(8)), (node_log, proc.stderr)
    assert "nvrx-otel run: verdict: OK: 8 ranks, no failure." in proc.stderr
    assert "step 10 loss 0.420 [repeated 8x across ranks 0-7]" in out  # the log view
    assert out.count("OK: 8 ranks, no failure.") == 1  # the run's report
    assert "FAILED: rank 5 (" in out and "first failure (its own evidence)" in out  # demo's
    assert "silent ranks" in out
    html = tmp_path / "report.html"
    assert html.is_file() and "<html" in html.read_text()[:500].lower()
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
