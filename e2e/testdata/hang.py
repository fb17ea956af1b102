# A worker that gives heartbeats until, on rank $HANG_RANK, it stops in a
# function standing for a collective that never completes. Like PyTorch's
# ProcessGroupNCCL with TORCH_NCCL_TRACE_BUFFER_SIZE set, it makes the pipe
# TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe and, when something is written
# to it, dumps a "flight recorder" to TORCH_FR_DUMP_TEMP_FILE<rank>.
import os
import pathlib
import threading
import time

rank = int(os.environ["RANK"])
heartbeat = pathlib.Path(os.environ["MUSTER_HEARTBEAT_FILE"])


def flight_recorder():
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if not stem:
        return
    pipe = f"{stem}{rank}.pipe"
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    while True:
        try:
            if os.read(fd, 128):
                break
        except BlockingIOError:
            pass
        time.sleep(0.05)
    dump = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank)
    with open(dump, "w") as f:
        f.write(f"flight recorder of rank {rank}\n")


def helper_thread_waits():
    threading.Event().wait()


def stuck_in_all_reduce():
    threading.Event().wait()


threading.Thread(target=flight_recorder, daemon=True).start()
threading.Thread(target=helper_thread_waits, daemon=True).start()
print("ready", flush=True)
step = 0
while True:
    heartbeat.touch()
    if rank == int(os.environ.get("HANG_RANK", "-1")) and step == 3:
        stuck_in_all_reduce()
    step += 1
    time.sleep(0.05)
