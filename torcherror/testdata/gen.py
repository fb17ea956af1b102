# Writes error files as torch.distributed.elastic's ErrorHandler.record_exception
# does (the same JSON shape), for an exception raised three calls deep.
import json
import time
import traceback


def write(path, exc_type, text):
    def load(batch):
        raise exc_type(text)

    def step(batch):
        return load(batch)

    def main():
        step(41)

    try:
        main()
    except BaseException as e:
        data = {"message": {"message": f"{type(e).__name__}: {e}",
                            "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
        with open(path, "w") as fp:
            json.dump(data, fp)


write("value_error.json", ValueError, "batch 41 has 3 columns, want 4")
write("multiline.json", RuntimeError, "CUDA error: out of memory\nTried to allocate 2.00 GiB")
write("no_message.json", KeyboardInterrupt, "")
