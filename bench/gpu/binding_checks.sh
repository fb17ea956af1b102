#!/usr/bin/env bash
# Binding on one GPU host, in one run:
#   1. the host's topology: nvidia-smi topo -m, lscpu, and each GPU's NUMA node in sysfs;
#   2. --report-bindings with --cpu-bind none, numa and cores on all the GPUs, each rank
#      printing the CPUs it runs on, to check the lines against the topology;
#   3. the data-loading-heavy DDP run (ddp_dataload.py: ResNet-50, 8 DataLoader workers a
#      rank augmenting on the CPU) under launcher run --cpu-bind none, numa and cores, and
#      under torchrun with and without --numa-binding node, ROUNDS interleaved rounds:
#      images/s of each, the pinned host-to-device copy rate of each rank, and its CPUs;
#   4. torch all_reduce bus bandwidth under --cpu-bind none and cores (NCCL's own threads
#      keep the worker's affinity).
# Results go under $OUT (default /tmp/muster-binding), a summary on stdout.
#
#   go build -o bin/ ./cmd/... && PYTHON=python3 bench/gpu/binding_checks.sh
#
# Settings: PYTHON [python3], NGPU [all], ROUNDS [3], STEPS [40], BIN [bin], OUT.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 2
L=${BIN:-bin}/launcher
PY=${PYTHON:-python3}
NGPU=${NGPU:-$(nvidia-smi -L | grep -c '^GPU')}
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-40}
O=${OUT:-/tmp/muster-binding}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

{
  echo "## nvidia-smi topo -m"; nvidia-smi topo -m
  echo "## lscpu"; lscpu
  echo "## GPUs' sysfs NUMA nodes"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x10de ] && case $(cat "$d/class") in 0x030*) echo "$(basename "$d") numa_node=$(cat "$d/numa_node") local_cpulist=$(cat "$d/local_cpulist")";; esac
  done
} > "$O/topology.txt" 2>&1
grep -E "^(NUMA node|Socket|Core|Thread|CPU\(s\))" "$O/topology.txt"

echo "## --report-bindings"
for mode in none numa cores; do
  timeout 120 "$L" run --gpus "$NGPU" --cpu-bind "$mode" --report-bindings -- \
    sh -c 'echo "affinity $(grep Cpus_allowed_list /proc/self/status | cut -f2) OMP_NUM_THREADS=$OMP_NUM_THREADS"' 2>&1 | tee -a "$O/report-bindings.txt"
done

echo "## data-loading DDP: $ROUNDS interleaved rounds, $STEPS steps"
run_mode() {
  case $1 in
    muster-*) timeout 300 "$L" run --gpus "$NGPU" --cpu-bind "${1#muster-}" -- "$PY" bench/gpu/ddp_dataload.py --steps "$STEPS" ;;
    torchrun) timeout 300 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" bench/gpu/ddp_dataload.py --steps "$STEPS" ;;
    torchrun-numa) timeout 300 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" --numa-binding node bench/gpu/ddp_dataload.py --steps "$STEPS" ;;
  esac
}
for r in $(seq "$ROUNDS"); do
  for m in muster-none muster-numa muster-cores torchrun torchrun-numa; do
    line=$(run_mode "$m" 2> "$O/ddp-$m-$r.err" | grep -o '{"img_per_s".*}')
    echo "$m round $r: ${line:-failed (see ddp-$m-$r.err)}" | tee -a "$O/ddp.txt"
  done
done

echo "## all_reduce busbw (GB/s), --cpu-bind none and cores"
for mode in none cores none cores; do
  echo "--cpu-bind $mode: $(timeout 300 "$L" run --gpus "$NGPU" --cpu-bind "$mode" -- "$PY" bench/gpu/torch_allreduce.py -b 64M -e 1G -f 16 2>/dev/null | tr '\n' ' ')" | tee -a "$O/allreduce.txt"
done
