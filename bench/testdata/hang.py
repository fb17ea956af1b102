# A worker that touches its heartbeat file every 50 ms; rank 1 prints the
# time of its last heartbeat and stops there, in a function standing for a
# collective that never completes. With FR_PIPE=1, every rank also answers
# PyTorch's dump pipe as ProcessGroupNCCL does (TORCH_NCCL_DEBUG_INFO_PIPE_FILE).
import os
import pathlib
import threading
import time

rank = int(os.environ["RANK"])
heartbeat = pathlib.Path(os.environ["MUSTER_HEARTBEAT_FILE"])


def flight_recorder():
    pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + f"{rank}.pipe"
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


if os.environ.get("FR_PIPE") == "1":
    threading.Thread(target=flight_recorder, daemon=True).start()
step = 0
while True:
    heartbeat.touch()
    if rank == 1 and step == 10:
        print(f"last-beat {time.time_ns()}", flush=True)
        threading.Event().wait()
    step += 1
    time.sleep(0.05)
