"""A small real training job for torchrun: gloo on CPU, a DataLoader with 2 workers, an
all_reduce per step. TRAIN_FAIL_RANK raises (uncaught) at step 5; TRAIN_HANG_RANK stops
at step 3 in ``hang_here`` while the others wait in ``all_reduce`` until gloo's timeout;
TRAIN_RECORD wraps the loop in torch's ``@record``."""

import datetime
import os
import sys
import time

import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import torch
from nvrx_otel.logging import setup_logger

log = setup_logger()
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
dist.init_process_group(
    "gloo",
    store=dist.PrefixStore(f"attempt{attempt}", store),  # torchrun reuses its store
    rank=rank,
    world_size=world,
    timeout=datetime.timedelta(seconds=float(os.environ.get("TRAIN_TIMEOUT_S", "20"))),
)
data = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4, num_workers=2)
print(f"rank {rank} attempt {attempt} started", flush=True)


def hang_here() -> None:
    time.sleep(600)


def train_step(step: int, batch: torch.Tensor) -> None:
    if step == 5 and rank == int(os.environ.get("TRAIN_FAIL_RANK", "-1")):
        raise RuntimeError(f"loss is NaN at step {step} on rank {rank}")
    if step == 3 and rank == int(os.environ.get("TRAIN_HANG_RANK", "-1")):
        hang_here()
    grad = batch.sum().reshape(1)
    dist.all_reduce(grad)


def main() -> None:
    for step, (batch,) in enumerate(data):
        log.info("step %d", step)
        train_step(step, batch)
        if step == 8:
            break
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    log.info("done")
    dist.destroy_process_group()


if os.environ.get("TRAIN_RECORD"):  # torch's @record: the error file torchrun reports
    from torch.distributed.elastic.multiprocessing.errors import record

    main = record(main)
main()
sys.exit(0)
