#!/usr/bin/env bash
# Who hung, on real GPUs, with --hang-timeout D (HT, seconds): every case runs TRIALS times,
# and each trial reports whether the summary named the rank that never entered
# the collective, which evidence spoke, and the seconds from that rank's last
# heartbeat (or its SIGSTOP) to the launcher's exit, against D + 3 s:
#   (a) rank 2 of 4 stuck before its all_reduce, after its heartbeat, so that
#       heartbeats cannot tell it from the ranks waiting in the collective;
#   (b) rank 0 of 4, the same;
#   (c) rank 2 stuck before a sub-group's all_reduce (even ranks, odd ranks);
#   (d) two agents of two GPUs each on this host, rank 3 (on agent b) stuck;
#   (e) an NCCL program without PyTorch (examples/nccl-c --loop), rank 2 of 4
#       SIGSTOPped while the others all-reduce.
#
#   go build -o bin/ ./cmd/... && BIN=bin bench/gpu/hang_verdict.sh   # writes under ${OUT:-/tmp/muster-verdict}
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
A=$BIN/agent L=$BIN/launcher
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-/tmp/muster-verdict}
HT=${HT:-5}
TRIALS=${TRIALS:-3}
CASES=${CASES:-abcde}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
run_case() { case "$CASES" in *"$1"*) return 0 ;; esac; return 1; }
W=examples/hang/allreduce_hang.py
HANG=(--hang-timeout "${HT}s" --hang-first-timeout 3m --kill-timeout 2s)
say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';') D=${HT}s TRIALS=$TRIALS"
say "# torch $($PY -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1)"

# verdict NAME CULPRIT START: the trial's line, from its stderr's summary and
# the seconds from START (Unix time) to now.
verdict() {
  local name=$1 culprit=$2 start=$3 code=$4 line named evidence
  line=$(grep -m1 ' failed: ' "$OUT_DIR/$name.err")
  named=no
  case "$line" in *"failed: rank $culprit (node"*) named=yes ;; esac
  evidence=$(echo "$line" | sed -n 's/.*evidence: \([^;]*\).*/\1/p')
  say "$name: exit $code, culprit rank $culprit named: $named, evidence: ${evidence:-none}," \
    "stopped $(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.2f", n - s}') s after its last heartbeat (D + 3 = $((HT + 3)) s)"
  say "    $line"
}

# torch_trial NAME CULPRIT LAUNCHER-ARGS... -- SCRIPT-ARGS...: one PyTorch job.
torch_trial() {
  local name=$1 culprit=$2 code last
  shift 2
  timeout -k 10 240 "$@" >"$OUT_DIR/$name.out" 2>"$OUT_DIR/$name.err"
  code=$?
  last=$(grep -m1 "rank $culprit last heartbeat" "$OUT_DIR/$name.out" | awk '{for (i = 1; i <= NF; i++) if ($i == "heartbeat") print $(i + 1)}' | tr -d ,)
  verdict "$name" "$culprit" "${last:-0}" "$code"
}

for t in $(seq "$TRIALS"); do
  run_case a && torch_trial "a$t" 2 "$L" run --gpus 4 "${HANG[@]}" --log-dir "$OUT_DIR/logs" --events "$OUT_DIR/a$t.events" -- \
    "$PY" "$W" --hang-rank 2 --hang-step 20 --step-seconds 0.05 --beat-then-stop
  run_case b && torch_trial "b$t" 0 "$L" run --gpus 4 "${HANG[@]}" -- "$PY" "$W" --hang-rank 0 --hang-step 20 --step-seconds 0.05 --beat-then-stop
  run_case c && torch_trial "c$t" 2 "$L" run --gpus 4 "${HANG[@]}" -- "$PY" "$W" --hang-rank 2 --hang-step 20 --step-seconds 0.05 --subgroup
done
run_case a && say "a1's ended event: $(grep '"ended"' "$OUT_DIR/a1.events")"

# (d) two agents of two GPUs each.
if run_case d; then
  GPUS_A=0,1 GPUS_B=2,3
  . bench/gpu/two_agents.sh
  start_a && start_b && wait_both || say "the two agents did not come up: $(tail -3 "$OUT_DIR"/agent-*.log)"
  for t in $(seq "$TRIALS"); do
    torch_trial "d$t" 3 "$L" run $C -n 2 --gpus 2 "${HANG[@]}" -- "$PY" "$PWD/$W" --hang-rank 3 --hang-step 20 --step-seconds 0.05 --beat-then-stop
  done
fi
run_case e || exit 0

# (e) NCCL without PyTorch: the C example, built against the wheel's NCCL.
NV=$($PY -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
CUDA=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
make -s -C examples/nccl-c CUDA_HOME="$CUDA" NCCL_HOME="$NV" NCCL_LIB=-l:libnccl.so.2 >"$OUT_DIR/build-c.txt" 2>&1 || say "the C example did not build: $(tail -3 "$OUT_DIR/build-c.txt")"
for t in $(seq "$TRIALS"); do
  name=e$t
  timeout -k 10 240 "$L" run --gpus 4 "${HANG[@]}" -- examples/nccl-c/allreduce --loop >"$OUT_DIR/$name.out" 2>"$OUT_DIR/$name.err" &
  job=$!
  pid=''
  for _ in $(seq 600); do
    pid=$(sed -n 's/.*rank 2 pid \([0-9]*\) looping.*/\1/p' "$OUT_DIR/$name.out" | head -1)
    [ -n "$pid" ] && grep -q 'rank 2 step 200' "$OUT_DIR/$name.out" && break
    sleep 0.1
  done
  start=$(date +%s.%N)
  [ -n "$pid" ] && kill -STOP "$pid"
  wait "$job"
  code=$?
  verdict "$name" 2 "$start" "$code"
done
