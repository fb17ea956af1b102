# PyTorch's flight-recorder pipe as ProcessGroupNCCL makes it (with
# TORCH_NCCL_TRACE_BUFFER_SIZE set): TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe,
# read until something is written to it; then a dump to
# TORCH_FR_DUMP_TEMP_FILE<rank>.
import os
import threading
import time


def serve(rank, dump):
    """Calls dump(path) in a thread of its own once the pipe is written to."""
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if not stem:
        return

    def wait():
        pipe = f"{stem}{rank}.pipe"
        os.mkfifo(pipe, 0o600)
        fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        while True:
            try:
                if os.read(fd, 128):
                    break
            except BlockingIOError:
                pass
            time.sleep(0.05)
        dump(os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank))

    threading.Thread(target=wait, daemon=True).start()
