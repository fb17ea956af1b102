"""A torch job that fails once: rank 1 of the first round exits 3 after an
all_reduce; the next round (TORCHELASTIC_RESTART_COUNT=1) succeeds. Each rank
prints when its all_reduce was done, on the machine's clock, so that the
time from the failure to every rank of the new round working can be read."""
import os
import sys
import time

import torch
import torch.distributed as dist

restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
world = dist.get_world_size()
print(f"restart {restart} rank {rank} world {world} port {os.environ['MASTER_PORT']} "
      f"id {os.environ.get('MUSTER_NCCL_UNIQUE_ID', '-')[:24]} sum {int(t.item())} done {time.time():.3f}", flush=True)
if int(t.item()) != world:
    sys.exit(2)
if restart == 0 and rank == 1:
    print(f"fail {time.time():.3f}", flush=True)
    os._exit(3)
if restart == 0:
    time.sleep(60)  # stopped by the restart
dist.destroy_process_group()
