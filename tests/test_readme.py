"""The README's quickstart, run as written: its ``train.py`` under a stand-in for torchrun
(the real one is not installed here) that starts the ranks as torchrun does — ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and ``TORCHELASTIC_RUN_ID`` from
``--rdzv-id`` — then the aggregator, the log view, the demo and its report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TORCHRUN = r"""
torchrun() {  # torchrun's environment for its workers; flags as the README uses them
  local n=1 run=none
  while [[ $1 == --* ]]; do
    case $1 in
      --nproc-per-node) n=$2; shift 2 ;;
      --rdzv-id) run=$2; shift 2 ;;
      *) echo "stand-in torchrun: unknown flag $1" >&2; return 2 ;;
    esac
  done
  local pids=() r
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n GROUP_RANK=0 \
      TORCHELASTIC_RUN_ID=$run TORCHELASTIC_RESTART_COUNT=0 python "$@" & pids+=($!)
  done
  local rc=0
  for r in "${pids[@]}"; do wait "$r" || rc=1; done
  return $rc
}
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
    spool = tmp_path / "spool"
    script = TORCHRUN + commands.replace("/tmp/nvrx", str(spool))
    bindir = Path(sys.executable).parent
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "LOCAL_", "WORLD", "SLURM_", "TORCHELASTIC", "NVRX_"))
    }
    environ["PATH"] = f"{bindir}{os.pathsep}{environ.get('PATH', '')}"
    environ["NVRX_OTEL_NODE_ID"] = "node007"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=environ, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    out = proc.stdout
    node_log = (tmp_path / "logs" / "nvrx_log_node007.log").read_text()
    steps = re.findall(r"\[workload:(\d)\(\d\) .*step 10 loss 0\.420$", node_log, re.M)
    assert sorted(map(int, steps)) == list(range(8)), (node_log, proc.stderr)
    assert "step 10 loss 0.420 [repeated 8x across ranks 0-7]" in out  # the log view
    assert "first failure (its own evidence)" in out and "rank 5 on" in out  # the demo's report
    assert "silent ranks" in out
    html = tmp_path / "report.html"
    assert html.is_file() and "<html" in html.read_text()[:500].lower()
