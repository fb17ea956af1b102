#!/usr/bin/env bash
# Checks `launcher run` on a machine with two GPUs: GPU discovery and
# assignment, the errors for too many GPUs, NCCL network detection, start-up
# time with and without GPUs, and how fast a job stops when one rank of a
# NCCL job dies while the other waits in an all_reduce.
#
#   go build -o bin/launcher ./cmd/launcher && LAUNCHER=bin/launcher bench/gpu/launch_checks.sh
set -u
cd "$(dirname "$0")/../.."
L=${LAUNCHER:-launcher}
PY=${PYTHON:-python3}
RUNS=${RUNS:-10}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

echo "## GPUs and their assignment"
nvidia-smi -L
$L run --gpus 2 -- sh -c 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES MUSTER_LOCAL_GPUS=$MUSTER_LOCAL_GPUS NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-} NCCL_COMM_ID=${NCCL_COMM_ID:-}"'
$L run --gpus 2 --nproc 1 -- sh -c 'echo "one worker: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES MUSTER_LOCAL_GPUS=$MUSTER_LOCAL_GPUS"'
$L run --gpus 2 --isolate-gpus -- sh -c 'echo "isolated: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
$L run --gpus 2 -- $PY -c 'import os, torch; r = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(r); print("torch sees", torch.cuda.device_count(), "GPUs; mine is", torch.cuda.get_device_properties(r).pci_bus_id if hasattr(torch.cuda.get_device_properties(r), "pci_bus_id") else torch.cuda.current_device())'

echo "## errors"
$L run --gpus 3 -- true; echo "exit $?"
$L run --gpus 2 --nproc 3 -- true; echo "exit $?"

echo "## doctor"
$L doctor

echo "## start-up, $RUNS runs each: wall ms"
for args in "--nproc 2" "--gpus 2"; do
  t0=$(date +%s%N)
  for i in $(seq "$RUNS"); do $L run $args -- true || echo fail; done
  t1=$(date +%s%N)
  echo "launcher run $args -- true: $(( (t1 - t0) / RUNS / 1000000 )) ms"
done

echo "## a rank dies while the other waits in all_reduce"
cat > /tmp/die.py <<'PY'
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
r = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print("warm all_reduce done", flush=True)
if r == 1:
    print("rank 1 fails now", file=sys.stderr, flush=True)
    os._exit(3)
dist.all_reduce(x)  # never completes: rank 1 is gone
torch.cuda.synchronize()
print("unreachable")
PY
t0=$(date +%s%N)
$L run --gpus 2 --kill-timeout 2s -- $PY /tmp/die.py
code=$?
t1=$(date +%s%N)
echo "muster: exit $code after $(( (t1 - t0) / 1000000 )) ms"
t0=$(date +%s%N)
timeout 120 torchrun --standalone --nproc-per-node 2 /tmp/die.py > /tmp/torchrun-die.log 2>&1
code=$?
t1=$(date +%s%N)
echo "torchrun: exit $code after $(( (t1 - t0) / 1000000 )) ms (timeout 120 s = 124)"
tail -3 /tmp/torchrun-die.log
