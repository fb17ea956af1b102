"""Every method of torch.distributed.TCPStore, as a client (is_master=False)
of the TCPStore that muster's agent serves on MASTER_ADDR:MASTER_PORT. Run it
as one worker: `launcher run --nproc 1 -- python tcpstore_client_check.py`.
Prints one line per check and a count; exits 1 if any failed."""
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print(f"torch {torch.__version__}; TORCHELASTIC_USE_AGENT_STORE={os.environ.get('TORCHELASTIC_USE_AGENT_STORE')}; store {host}:{port}")


def client(timeout=30):
    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout))


s = client()
results = []


def check(name, fn, want=None, raises=False):
    t0 = time.monotonic()
    try:
        got = fn()
        ok = not raises and (want is None or got == want)
        detail = repr(got)[:80]
    except Exception as e:  # noqa: BLE001 - every failure is reported
        ok, detail = raises, f"{type(e).__name__}: {str(e)[:100]}"
    ms = (time.monotonic() - t0) * 1000
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail} ({ms:.0f} ms)", flush=True)


def later(delay, fn):
    def run():
        time.sleep(delay)
        fn()
    th = threading.Thread(target=run)
    th.start()
    return th


check("set then get", lambda: (s.set("a", "1"), s.get("a"))[1], b"1")
check("add to a new key", lambda: s.add("n", 5), 5)
check("add a negative", lambda: s.add("n", -2), 3)
check("an added key reads as decimal text", lambda: s.get("n"), b"3")
check("compare_set, matching", lambda: s.compare_set("a", "1", "2"), b"2")
check("compare_set, not matching", lambda: s.compare_set("a", "x", "3"), b"2")
check("compare_set, missing key, empty expected", lambda: s.compare_set("c", "", "new"), b"new")
check("compare_set, missing key, other expected", lambda: s.compare_set("d", "x", "y"), b"x")
check("check, all there", lambda: s.check(["a", "n"]), True)
check("check, one missing", lambda: s.check(["a", "zz"]), False)
check("wait, there", lambda: s.wait(["a", "n"]))
t0 = time.monotonic()
check("wait with a 1 s timeout, never set", lambda: s.wait(["never"], timedelta(seconds=1)), raises=True)
check("the timed-out wait took about 1 s", lambda: 0.9 < time.monotonic() - t0 < 5, True)
check("the connection serves after a cancelled wait", lambda: s.get("a"), b"2")
other = client()
th = later(0.3, lambda: other.set("late", "v"))
check("wait woken by another client's set", lambda: (s.wait(["late"]), s.get("late"))[1], b"v")
th.join()
check("get of a missing key waits, then times out", lambda: (s.set_timeout(timedelta(seconds=1)), s.get("missing"))[1], raises=True)
check("set_timeout back to 30 s", lambda: s.set_timeout(timedelta(seconds=30)))
before = s.num_keys()
check("num_keys counts a new key", lambda: (s.set("k-new", "x"), s.num_keys())[1], before + 1)
check("delete_key, present", lambda: s.delete_key("c"), True)
check("delete_key, missing", lambda: s.delete_key("c"), False)
check("append twice", lambda: (s.append("ap", "x"), s.append("ap", "y"), s.get("ap"))[2], b"xy")
check("multi_set then multi_get", lambda: (s.multi_set(["m1", "m2"], ["v1", "v2"]), s.multi_get(["m1", "m2"]))[1], [b"v1", b"v2"])
check("has_extended_api", lambda: s.has_extended_api(), True)
if hasattr(s, "queue_push"):
    check("queue_push twice, queue_len", lambda: (s.queue_push("q", "i1"), s.queue_push("q", "i2"), s.queue_len("q"))[2], 2)
    check("queue_pop, first in first out", lambda: s.queue_pop("q"), b"i1")
    check("queue_pop without blocking", lambda: s.queue_pop("q", block=False), b"i2")
    check("queue_pop without blocking, empty", lambda: s.queue_pop("q", block=False), raises=True)
    th = later(0.3, lambda: other.queue_push("q2", "pushed"))
    check("blocking queue_pop woken by another client's push", lambda: s.queue_pop("q2"), b"pushed")
    th.join()
else:
    print("(this torch has no queue_* methods)")
p = dist.PrefixStore("pfx", s)
check("PrefixStore set/get", lambda: (p.set("k", "pv"), p.get("k"))[1], b"pv")
check("PrefixStore key seen raw", lambda: s.get("pfx/k"), b"pv")
big = bytes(range(256)) * (8 * 1024 * 1024 // 256 - 1)
check("a value just under 8 MiB", lambda: (s.set("big", big), s.get("big") == big)[1], True)
check("a binary key", lambda: (s.set("\x01\x7f key", "b"), s.get("\x01\x7f key"))[1], b"b")
bad_key, bad_value = client(5), client(5)
check("a key over 8 KiB closes that client's connection", lambda: (bad_key.set("k" * (8 * 1024 + 1), "v"), bad_key.get("a"))[1], raises=True)
check("a value over 8 MiB closes that client's connection", lambda: (bad_value.set("huge", b"x" * (8 * 1024 * 1024 + 1)), bad_value.get("a"))[1], raises=True)
check("and no other", lambda: s.get("a"), b"2")
n = sum(results)
print(f"{n} of {len(results)} client checks passed")
sys.exit(0 if n == len(results) else 1)
