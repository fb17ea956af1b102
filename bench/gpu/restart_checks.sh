#!/usr/bin/env bash
# A torch job on two GPUs whose rank 1 fails once: `launcher run --max-restarts 1`
# next to `torchrun --max-restarts 1`, interleaved. Each prints the time from the
# failure to every rank of the new round done with an NCCL all_reduce, and checks
# that the new round had a new MASTER_PORT (and, under muster, a new unique ID).
#
#   go build -o bin/ ./cmd/... && BIN=bin bench/gpu/restart_checks.sh   # writes under ${OUT:-/tmp/muster-restart}
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
PY=${PYTHON:-python3}
TRIALS=${TRIALS:-5}
OUT_DIR=${OUT:-/tmp/muster-restart}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
W=bench/gpu/restart_worker.py
TORCHRUN=$(dirname "$(command -v "$PY")")/torchrun

# restart_time LOG: the failure's time to the last "done" of restart 1, in ms.
restart_time() {
  awk '/^(\[[0-9]+\] )?fail /{for(i=1;i<=NF;i++) if($i=="fail") f=$(i+1)}
       /(^|\] )restart 1 .* done /{for(i=1;i<=NF;i++) if($i=="done" && $(i+1)>d) d=$(i+1)}
       END {if (f && d) printf "%.0f", (d-f)*1000; else print "NA"}' "$1"
}
# ports LOG: the MASTER_PORT of each restart, "p0 p1".
ports() { awk '/(^|\] )restart [01] rank 0 /{for(i=1;i<=NF;i++) if($i=="port") p[$0 ~ /restart 1 /]=$(i+1)} END{print p[0], p[1]}' "$1"; }

say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';') torch $($PY -c 'import torch; print(torch.__version__)')"
for i in $(seq "$TRIALS"); do
  m="$OUT_DIR/muster-$i.log"; t="$OUT_DIR/torchrun-$i.log"
  "$BIN/launcher" run --gpus 2 --max-restarts 1 -- "$PY" "$W" >"$m" 2>&1; mc=$?
  "$TORCHRUN" --standalone --nproc-per-node 2 --max-restarts 1 "$W" >"$t" 2>&1; tc=$?
  say "trial $i: muster exit $mc restart $(restart_time "$m") ms ports $(ports "$m") | torchrun exit $tc restart $(restart_time "$t") ms ports $(ports "$t")"
done
grep -h "restart 1 rank" "$OUT_DIR"/muster-1.log | head -2 | tee -a "$summary"
grep -h "round 0 stops" "$OUT_DIR"/muster-1.log | tee -a "$summary"
