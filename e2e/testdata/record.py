# A worker whose main is wrapped as torch.distributed.elastic's @record
# wraps it: an exception it raises is written to TORCHELASTIC_ERROR_FILE in
# the same JSON (ErrorHandler.record_exception), then raised on. Rank
# $FAIL_RANK raises a ValueError three calls deep; the others exit 0.
import json
import os
import time
import traceback


def record(fn):
    def wrapper():
        try:
            return fn()
        except Exception as e:
            data = {"message": {"message": f"{type(e).__name__}: {e}",
                                "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
            with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as fp:
                json.dump(data, fp)
            raise
    return wrapper


def load(batch):
    raise ValueError(f"batch {batch} has 3 columns, want 4")


def step(batch):
    return load(batch)


@record
def main():
    if os.environ["RANK"] == os.environ.get("FAIL_RANK"):
        step(41)


main()
