# Heartbeats whose times a test sets exactly: local rank 0 of each node
# touches the heartbeat file of every rank of its node, every 50 ms, from
# one process, until the wall-clock time STOP_AT (for ranks of several nodes)
# or for BEAT_FOR seconds from its start (1 s by default). Then, by BEAT_MODE:
#   lead      rank LEAD_RANK's last beat is BEAT_GAP seconds before the
#             others' (it fell silent first);
#   together  every rank's last beat is at the same moment;
#   spin      rank LEAD_RANK goes on beating by itself for ever (it spins
#             outside any collective), the others stop together;
#   stop      every rank's last beat is at the same moment, and rank
#             LEAD_RANK's process then stops itself (SIGSTOP).
# Every rank then waits, as ranks in a collective that never ends do. With
# FR_FIXTURES set, each rank also makes PyTorch's dump pipe and, when it is
# written to, dumps FR_FIXTURES/hang4_rank<rank>.pkl as its flight recorder.
import os
import signal
import time

import dumppipe

rank = int(os.environ["RANK"])
local = int(os.environ["LOCAL_RANK"])
nproc = int(os.environ["LOCAL_WORLD_SIZE"])
beat = os.environ["MUSTER_HEARTBEAT_FILE"]
stem = beat[: beat.rindex("-") + 1]
first = rank - local
mode = os.environ["BEAT_MODE"]
lead = int(os.environ.get("LEAD_RANK", "2"))
gap = float(os.environ.get("BEAT_GAP", "0.05"))
stop_at = float(os.environ.get("STOP_AT") or time.time() + float(os.environ.get("BEAT_FOR", "1")))
last_beaten = f"{stem}last"
ours = range(first, first + nproc)


def dump_fixture(path):
    with open(f"{os.environ['FR_FIXTURES']}/hang4_rank{rank}.pkl", "rb") as src:
        dump = src.read()
    with open(path, "wb") as f:
        f.write(dump)


if os.environ.get("FR_FIXTURES"):
    dumppipe.serve(rank, dump_fixture)


def touch(ranks):
    # One time for all of them, whatever this process waits for the CPU
    # between two files on a loaded machine.
    now = time.time_ns()
    for r in ranks:
        os.utime(f"{stem}{r}", ns=(now, now))


if local == 0:
    while time.time() < stop_at:
        touch(ours)
        time.sleep(0.05)
    if mode == "lead":
        # The loop slept 50 ms since the last beat of all.
        time.sleep(max(0.0, gap - 0.05))
        touch([r for r in ours if r != lead])
    elif mode in ("together", "stop"):
        touch(ours)
    open(last_beaten, "w").close()
    print("last beat", flush=True)
if mode == "stop" and rank == lead:
    while not os.path.exists(last_beaten):
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGSTOP)
if mode == "spin" and rank == lead:
    while True:
        touch([rank])
        time.sleep(0.05)
while True:
    time.sleep(3600)
