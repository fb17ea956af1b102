"""A small DistributedDataParallel training run, started by muster or torchrun.

    launcher run --gpus 2 -- python3 examples/ddp/train.py --steps 20

It reads the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT) that muster sets, trains a tiny model on random data, prints the
loss from rank 0, and at the end checks that every rank holds the same
parameters, exiting non-zero if not.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            print(f"{name} is not set: run this under `launcher run` or torchrun", file=sys.stderr)
            return 2
    local_rank = int(os.environ["LOCAL_RANK"])
    # CUDA_VISIBLE_DEVICES lists the job's GPUs; this worker's is the LOCAL_RANK-th,
    # or, with several GPUs a worker (muster's --nproc below --gpus), the first of
    # MUSTER_LOCAL_GPUS.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    first = os.environ.get("MUSTER_LOCAL_GPUS", "").split(",")[0]
    local_rank = visible.index(first) if first and first in visible else local_rank
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()

    # Same initial weights everywhere (DDP also broadcasts them); different data per rank.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).cuda()
    ddp = DDP(model, device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
    target_w = torch.arange(32, dtype=torch.float32, device="cuda") / 32

    for step in range(args.steps):
        x = torch.randn(args.batch, 32, device="cuda", generator=gen)
        y = (x @ target_w).unsqueeze(1)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step:3d} loss {loss.item():.5f}", flush=True)

    # Gradients were averaged every step, so the parameters must agree exactly.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    mismatched = [r for r, g in enumerate(gathered) if not torch.equal(g, flat)]
    dist.destroy_process_group()
    if mismatched:
        print(f"rank {rank}: parameters differ from ranks {mismatched}", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"parameters equal on all {world} ranks after {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
