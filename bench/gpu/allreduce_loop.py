"""A rank that all_reduces forever and says "looping" once warm: the job that
a node is killed under. With a directory argument it first writes its pid
there, in a file named by its rank, so that a script can tell when every
rank is gone."""
import os
import sys

import torch
import torch.distributed as dist

if len(sys.argv) > 1:
    with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as f:
        f.write(f"{os.getpid()}\n")
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1 << 20, device="cuda")
n = 0
while True:
    dist.all_reduce(x)
    n += 1
    if n == 50:
        torch.cuda.synchronize()
        print("looping", flush=True)
