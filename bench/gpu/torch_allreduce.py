"""torch.distributed all_reduce bus bandwidth, to compare with `launcher bench allreduce`.

Started by torchrun or `launcher run` (reads RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT). Times --iters out-of-place-free (in-place) float32
sums per size after --warmup ones, wall clock over the whole loop then a
device synchronize, and prints one line per size from rank 0:

    size_bytes busbw_GBps time_us

--trivial: init, one small all_reduce, exit (start-up cost measurement).
Without RANK set it runs alone (world size 1, no launcher).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-b", "--minbytes", default="1M")
    p.add_argument("-e", "--maxbytes", default="4G")
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--trivial", action="store_true")
    a = p.parse_args()

    if "RANK" not in os.environ:  # no launcher: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, n = dist.get_rank(), dist.get_world_size()

    if a.trivial:
        t = torch.ones(1024, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        ok = t[0].item() == n
        dist.destroy_process_group()
        return 0 if ok else 1

    size = parse_size(a.minbytes)
    top = parse_size(a.maxbytes)
    buf = torch.ones(top // 4, dtype=torch.float32, device="cuda")
    if rank == 0:
        print("# size_bytes busbw_GBps time_us", flush=True)
    while size <= top:
        t = buf[: size // 4]
        for _ in range(a.warmup):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        sec = (time.perf_counter() - start) / a.iters
        s = torch.tensor([sec], dtype=torch.float64, device="cuda")
        dist.all_reduce(s)
        sec = s.item() / n
        busbw = size / sec / 1e9 * (2 * (n - 1) / n if n > 1 else 1)
        if rank == 0:
            print(f"{size} {busbw:.2f} {sec * 1e6:.1f}", flush=True)
        size *= a.stepfactor
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
