"""A torch job whose rank --hang-rank never enters an all_reduce, for --hang-timeout.

    launcher run --gpus 2 --hang-timeout 10s --hang-first-timeout 5m --log-dir logs -- \
        python3 examples/hang/allreduce_hang.py --hang-rank 1

Every rank touches $MUSTER_HEARTBEAT_FILE before each step's all_reduce; at step
--hang-step, rank --hang-rank stops before it (and before that step's heartbeat),
in stuck_before_all_reduce, and the others wait in the collective. muster finds the silent rank after --hang-timeout,
dumps every rank's NCCL flight recorder and the hung rank's Python stacks into
the log directory, and stops the job. Without muster (or with --hang-timeout 0)
PyTorch's own watchdog ends it after --nccl-timeout (600 s, its default). Each
rank prints the time of its last heartbeat, to measure one against the other.
"""
import argparse
import datetime
import os
import pathlib
import threading
import time

import torch
import torch.distributed as dist


def stuck_before_all_reduce() -> None:
    threading.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-rank", type=int, default=1)
    parser.add_argument("--hang-step", type=int, default=20)
    parser.add_argument("--nccl-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--step-seconds", type=float, default=0.5, help="compute time a step, before its all_reduce")
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"],
                        help="gloo: CPU tensors, for ranks that share one GPU or have none (no flight recorder)")
    parser.add_argument("--beat-then-stop", action="store_true",
                        help="the hung rank gives its heartbeat of --hang-step, then stops before the all_reduce")
    parser.add_argument("--subgroup", action="store_true",
                        help="each step also all-reduces in a group of the even or the odd ranks; the hung rank stops before that one")
    args = parser.parse_args()

    beat_file = os.environ.get("MUSTER_HEARTBEAT_FILE")
    beat = pathlib.Path(beat_file).touch if beat_file else (lambda: None)
    local_rank = int(os.environ["LOCAL_RANK"])
    timeout = datetime.timedelta(seconds=args.nccl_timeout)
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank), timeout=timeout)
        x = torch.ones(1 << 20, device="cuda")
    else:
        dist.init_process_group("gloo", timeout=timeout)
        x = torch.ones(1 << 20)
    rank = dist.get_rank()
    sub = None
    if args.subgroup:
        # Every rank makes every group; each uses its own: even ranks, odd ranks.
        world = dist.get_world_size()
        groups = [dist.new_group([r for r in range(world) if r % 2 == p]) for p in (0, 1)]
        sub = groups[rank % 2]
    hangs = rank == args.hang_rank
    last = time.time()
    for step in range(1_000_000):
        at_hang = hangs and step == args.hang_step
        if at_hang and not (args.beat_then_stop or args.subgroup):
            print(f"rank {rank} last heartbeat {last:.3f}, now stuck", flush=True)
            stuck_before_all_reduce()
        beat()  # before the collective: a rank that never gets here is silent longest
        last = time.time()
        if step == args.hang_step:
            print(f"rank {rank} last heartbeat {last:.3f}, now waiting in all_reduce", flush=True)
        if at_hang and args.beat_then_stop and not args.subgroup:
            stuck_before_all_reduce()  # beat like the others: heartbeats cannot tell
        time.sleep(args.step_seconds)  # the step's compute
        dist.all_reduce(x)
        if sub is not None:
            if at_hang:
                stuck_before_all_reduce()  # the sub-group's collective, after the world's
            dist.all_reduce(x, group=sub)
        if args.backend == "nccl":
            torch.cuda.synchronize()

if __name__ == "__main__":
    main()
