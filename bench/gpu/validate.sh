#!/usr/bin/env bash
# Validates muster's GPU path on one machine with two GPUs, in one go:
#   (a) `launcher bench allreduce` against torch.distributed all_reduce, 1 MiB to 4 GiB,
#       printing the busbw ratio muster/torch per size (target >= 0.98 from 64 MiB up),
#       plus a short checked run of every collective;
#   (b) the C example (examples/nccl-c) under `launcher run --gpus 2`;
#   (c) a few DDP training steps (examples/ddp) under `launcher run --gpus 2`;
#   (d) the end-to-end time of a trivial 2-GPU torch job under `launcher run`, under
#       torchrun, and of the same script alone, 5 runs each.
# Everything is written under $OUT (default /tmp/muster-validate).
#
#   go build -o bin/launcher ./cmd/launcher && LAUNCHER=bin/launcher bench/gpu/validate.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${OUT:-/tmp/muster-validate}
mkdir -p "$OUT_DIR"
LAUNCHER=${LAUNCHER:-launcher}
PY=${PYTHON:-python3}
RUNS=${RUNS:-5}
# Both sides run NCCL's ring and tree algorithms only: NVLink SHARP stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0

# muster and torch use the same NCCL: the one in torch's nvidia-nccl wheel, when present.
NV_NCCL=$($PY -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
if [ -n "$NV_NCCL" ] && [ -e "$NV_NCCL/lib/libnccl.so.2" ]; then
  export MUSTER_NCCL_LIBRARY="$NV_NCCL/lib/libnccl.so.2"
fi
say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';')"
say "# torch $($PY -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"
say "# MUSTER_NCCL_LIBRARY=${MUSTER_NCCL_LIBRARY:-<search>}"

# (a) allreduce bandwidth, muster vs torch.distributed
say "## (a) allreduce busbw, muster / torch"
$LAUNCHER run --gpus 2 --no-tag-output -- $LAUNCHER bench allreduce -b 1M -e 4G -f 2 -c 1 2>&1 | tee "$OUT_DIR/muster_allreduce.txt" || status=1
torchrun --standalone --nproc-per-node 2 bench/gpu/torch_allreduce.py -b 1M -e 4G -f 2 2>&1 | tee "$OUT_DIR/torch_allreduce.txt" || status=1
awk '
  FNR == NR { if ($1 ~ /^[0-9]+$/ && NF >= 13) { oop[$1] = $8; inp[$1] = $12 }; next }
  $1 ~ /^[0-9]+$/ && NF == 3 { torch[$1] = $2; order[++n] = $1 }
  END {
    printf "%12s  %12s  %12s  %12s  %9s  %9s\n", "size(B)", "muster-oop", "muster-ip", "torch", "oop/torch", "ip/torch"
    bad = 0
    for (i = 1; i <= n; i++) {
      s = order[i]; if (!(s in oop) || torch[s] == 0) { print s, "missing"; bad = 1; continue }
      r1 = oop[s] / torch[s]; r2 = inp[s] / torch[s]
      mark = (s >= 67108864 && r1 < 0.98) ? "  below 0.98" : ""
      if (mark != "") bad = 1
      printf "%12s  %12.2f  %12.2f  %12.2f  %9.3f  %9.3f%s\n", s, oop[s], inp[s], torch[s], r1, r2, mark
    }
    exit bad
  }' "$OUT_DIR/muster_allreduce.txt" "$OUT_DIR/torch_allreduce.txt" | tee -a "$summary" || status=1

say "## (a) every collective, checked"
for c in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
  $LAUNCHER run --gpus 2 --no-tag-output -- $LAUNCHER bench $c -b 8 -e 128M -f 32 -c 1 2>&1 | tee -a "$OUT_DIR/collectives.txt" >/dev/null
  rc=$?; [ $rc -ne 0 ] && status=1
  say "$(printf '%-14s exit %d  %s' "$c" $rc "$(grep -E '^# (Out of bounds|Avg bus)' "$OUT_DIR/collectives.txt" | tail -2 | tr -s ' ' | tr '\n' ' ')")"
done

# (b) the C example
say "## (b) examples/nccl-c"
{
  if [ -n "$NV_NCCL" ]; then
    make -C examples/nccl-c NCCL_HOME="$NV_NCCL" NCCL_LIB=-l:libnccl.so.2
  else
    make -C examples/nccl-c
  fi && $LAUNCHER run --gpus 2 -- examples/nccl-c/allreduce
} >"$OUT_DIR/nccl_c.txt" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
say "exit $rc: $(grep -c 'correct' "$OUT_DIR/nccl_c.txt") of 2 ranks correct"

# (c) DDP training
say "## (c) examples/ddp"
$LAUNCHER run --gpus 2 -- $PY examples/ddp/train.py --steps 20 >"$OUT_DIR/ddp.txt" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
say "exit $rc: $(grep -E 'step +19|parameters' "$OUT_DIR/ddp.txt" | tr '\n' ' ')"

# (d) end-to-end time of a trivial job
say "## (d) trivial 2-GPU torch job, wall seconds, $RUNS runs each"
timed() { # name, command...
  local name=$1; shift
  local times=() t0 t1 rc
  for _ in $(seq "$RUNS"); do
    t0=$(date +%s.%N)
    "$@" >>"$OUT_DIR/startup.txt" 2>&1; rc=$?
    t1=$(date +%s.%N)
    [ $rc -ne 0 ] && { status=1; echo "$name failed: exit $rc" >>"$OUT_DIR/startup.txt"; }
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
  done
  say "$(printf '%-28s' "$name") $(printf '%6.2f ' "${times[@]}") mean $(printf '%s\n' "${times[@]}" | awk '{s+=$1} END {printf "%.2f", s/NR}')"
}
timed "launcher run --gpus 2" $LAUNCHER run --gpus 2 -- $PY bench/gpu/torch_allreduce.py --trivial
timed "torchrun --nproc-per-node 2" torchrun --standalone --nproc-per-node 2 bench/gpu/torch_allreduce.py --trivial
timed "no launcher (world size 1)" $PY bench/gpu/torch_allreduce.py --trivial

say "# validate: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
