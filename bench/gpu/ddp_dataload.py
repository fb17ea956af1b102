"""A data-loading-heavy DDP run: ResNet-50 on random images that DataLoader
workers make and augment on the CPU, to measure what CPU binding does.

Started by `launcher run` or torchrun (reads RANK, WORLD_SIZE, LOCAL_RANK).
Each rank first times pinned host-to-device copies of --h2d-mib MiB, then
trains --steps steps after --warmup ones, with --workers DataLoader
workers, batch --batch, bf16 autocast. Rank 0 prints one JSON line:

    {"img_per_s": ..., "h2d_gbps": [per rank], "cpus": [per rank], "omp": [...]}
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
import torchvision
from torchvision.transforms import v2


class RandomImages(Dataset):
    """Random 256x256 images, cropped, flipped and colour-jittered on the CPU."""

    def __init__(self, n: int):
        self.n = n
        self.augment = v2.Compose([
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, 256, 256), dtype=torch.uint8, generator=g)
        return self.augment(img), i % 1000


def h2d_gbps(dev: torch.device, mib: int, reps: int = 10) -> float:
    host = torch.empty(mib << 20, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty_like(host, device=dev)
    gpu.copy_(host, non_blocking=True)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        gpu.copy_(host, non_blocking=True)
    torch.cuda.synchronize(dev)
    return reps * (mib << 20) / (time.perf_counter() - t0) / 1e9


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--h2d-mib", type=int, default=256)
    args = p.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()

    h2d = h2d_gbps(dev, args.h2d_mib)
    model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    n = (args.steps + args.warmup) * args.batch
    data = RandomImages(n * world)
    sampler = torch.utils.data.distributed.DistributedSampler(data, world, rank, shuffle=False)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                        pin_memory=True, persistent_workers=False, prefetch_factor=4)
    t0 = None
    for step, (x, y) in enumerate(loader):
        if step == args.warmup:
            torch.cuda.synchronize(dev)
            dist.barrier()
            t0 = time.perf_counter()
        x = x.to(dev, non_blocking=True, memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize(dev)
    dist.barrier()
    elapsed = time.perf_counter() - t0
    facts = torch.tensor([h2d, len(os.sched_getaffinity(0)), int(os.environ.get("OMP_NUM_THREADS", "0") or 0)],
                         dtype=torch.float64, device=dev)
    every = [torch.zeros_like(facts) for _ in range(world)]
    dist.all_gather(every, facts)
    if rank == 0:
        print(json.dumps({
            "img_per_s": round(args.steps * args.batch * world / elapsed, 1),
            "h2d_gbps": [round(f[0].item(), 1) for f in every],
            "cpus": [int(f[1].item()) for f in every],
            "omp": [int(f[2].item()) for f in every],
        }), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
