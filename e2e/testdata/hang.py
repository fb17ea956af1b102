# A worker that gives heartbeats until, on rank $HANG_RANK, it stops in a
# function standing for a collective that never completes. Like PyTorch's
# ProcessGroupNCCL with TORCH_NCCL_TRACE_BUFFER_SIZE set, it makes the pipe
# TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe and, when something is written
# to it, dumps a "flight recorder" to TORCH_FR_DUMP_TEMP_FILE<rank>.
import os
import pathlib
import threading
import time

import dumppipe

rank = int(os.environ["RANK"])
heartbeat = pathlib.Path(os.environ["MUSTER_HEARTBEAT_FILE"])


def dump_text(path):
    with open(path, "w") as f:
        f.write(f"flight recorder of rank {rank}\n")


def helper_thread_waits():
    threading.Event().wait()


def stuck_in_all_reduce():
    threading.Event().wait()


dumppipe.serve(rank, dump_text)
threading.Thread(target=helper_thread_waits, daemon=True).start()
print("ready", flush=True)
step = 0
while True:
    heartbeat.touch()
    if rank == int(os.environ.get("HANG_RANK", "-1")) and step == 3:
        stuck_in_all_reduce()
    step += 1
    time.sleep(0.05)
