#!/usr/bin/env bash
# Hang detection and node health on a real GPU, next to torch's own timeout:
#   (a) one NCCL rank that stops before its all_reduce, under --hang-timeout 5s:
#       its NCCL flight recorder dumped into the log directory, its Python stacks
#       in its stderr log, the job stopped (the GPU health check passed first);
#   (b) two gloo ranks, rank 1 never entering the all_reduce: the time from its
#       last heartbeat to the launcher's exit under --hang-timeout 10s, against
#       torch's own timeout of the same process group (timeout=30s, not its 600 s
#       default) without --hang-timeout;
# Tests built here with `go test -c` (NVML's XID events, cgroups) run first.
#
#   go build -o bin/ ./cmd/... && BIN=bin bench/gpu/hang_checks.sh   # writes under ${OUT:-/tmp/muster-hang}
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-/tmp/muster-hang}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
W=examples/hang/allreduce_hang.py
say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';') cgroup: $(stat -fc %T /sys/fs/cgroup)"
say "# torch $($PY -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"

# Go tests built elsewhere, run in their packages' folders.
for t in "$BIN"/*.test; do
  [ -e "$t" ] || continue
  pkg=$(basename "$t" .test)
  say "## go test $pkg"
  (cd "$pkg" && "$t" -test.count=1 -test.v 2>&1) >"$OUT_DIR/test_$pkg.txt"
  say "$(grep -E '^(--- |ok|PASS|FAIL)' "$OUT_DIR/test_$pkg.txt" | sort | uniq -c | sort -rn | head -20)"
done

# after LOG RANK: seconds from rank RANK's last heartbeat to now.
after() {
  awk -v now="$(date +%s.%N)" -v r="$2" '$0 ~ "rank " r " last heartbeat" {for(i=1;i<=NF;i++) if($i=="heartbeat") t=$(i+1)}
    END {if (t) printf "%.2f", now-t; else print "NA"}' "$1"
}

for trial in 1 2 3; do
  say "## (a) one NCCL rank stuck before its all_reduce, --hang-timeout 5s, trial $trial"
  rm -rf "$OUT_DIR/fr$trial"
  timeout 120 "$BIN/launcher" run --gpus 1 --hang-timeout 5s --hang-first-timeout 3m --log-dir "$OUT_DIR/fr$trial" -- \
    $PY $W --hang-rank 0 --hang-step 10 --step-seconds 0.1 >"$OUT_DIR/a$trial.out" 2>"$OUT_DIR/a$trial.err"
  code=$?
  say "exit $code, $(after "$OUT_DIR/a$trial.out" 0) s after the last heartbeat"
  say "$(grep -m1 'hung' "$OUT_DIR/a$trial.err")"
  say "files: $(cd "$OUT_DIR/fr$trial"/j-* && ls -l | awk 'NR>1 {print $NF, $5}' | tr '\n' ' ')"
  say "Python stacks in rank 0's stderr log: $(grep -c 'stuck_before_all_reduce' "$OUT_DIR"/fr$trial/j-*/rank-0.err.log 2>/dev/null)"
done

for trial in 1 2 3; do
  say "## (b) two gloo ranks, rank 1 stuck, trial $trial"
  timeout 120 "$BIN/launcher" run --nproc 2 --hang-timeout 10s --hang-first-timeout 3m -- \
    $PY $W --backend gloo --hang-rank 1 --hang-step 10 --step-seconds 0.1 >"$OUT_DIR/b$trial.out" 2>"$OUT_DIR/b$trial.err"
  say "muster --hang-timeout 10s: exit $?, $(after "$OUT_DIR/b$trial.out" 1) s after rank 1's last heartbeat"
  say "$(grep -m1 'hung' "$OUT_DIR/b$trial.err")"
  timeout 120 "$BIN/launcher" run --nproc 2 -- \
    $PY $W --backend gloo --hang-rank 1 --hang-step 10 --step-seconds 0.1 --nccl-timeout 30 >"$OUT_DIR/t$trial.out" 2>"$OUT_DIR/t$trial.err"
  say "torch's timeout=30s alone: exit $?, $(after "$OUT_DIR/t$trial.out" 1) s after rank 1's last heartbeat"
  say "$(grep -m1 -i 'timed out\|timeout' "$OUT_DIR/t$trial.err" | cut -c1-200)"
done

