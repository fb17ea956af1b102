#!/usr/bin/env bash
# Two agents on one host, each offering one GPU on its own address, joined by
# gossip: the DDP example across the two "nodes", `launcher bench allreduce`
# across them next to the one-node two-GPU run, and how long the surviving
# rank takes to stop when one agent is killed mid-job.
#
#   go build -o bin/ ./cmd/... && BIN=bin bench/gpu/cluster_checks.sh   # writes under ${OUT:-/tmp/muster-cluster}
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
L=$BIN/launcher A=$BIN/agent
PY=${PYTHON:-python3}
TRIALS=${TRIALS:-5}
OUT_DIR=${OUT:-/tmp/muster-cluster}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
NV_NCCL=$($PY -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
if [ -n "$NV_NCCL" ] && [ -e "$NV_NCCL/lib/libnccl.so.2" ]; then
  export MUSTER_NCCL_LIBRARY="$NV_NCCL/lib/libnccl.so.2"
fi
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

. bench/gpu/two_agents.sh

say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';')"
say "# MUSTER_NCCL_LIBRARY=${MUSTER_NCCL_LIBRARY:-<search>}"
start_a; sleep 0.5; start_b; wait_both || exit 1
$L nodes $C | tee -a "$summary"

say "## DDP example on two nodes, one GPU each"
$L run $C -n 2 --gpus 1 -- $PY examples/ddp/train.py --steps 20 2>&1 | tee "$OUT_DIR/ddp.txt" | tail -4 | tee -a "$summary"

say "## allreduce: two nodes x one GPU (the agents' NCCL choice), then sockets only, then one node x two GPUs"
$L run $C -n 2 --gpus 1 --no-tag-output -- $L bench allreduce -b 1M -e 1G -f 2 2>&1 | tee "$OUT_DIR/allreduce_2nodes.txt"
$L run $C -n 2 --gpus 1 --no-tag-output -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -- $L bench allreduce -b 1M -e 1G -f 2 2>&1 | tee "$OUT_DIR/allreduce_2nodes_sockets.txt"
$L run --embedded --gpus 2 --no-tag-output -- $L bench allreduce -b 1M -e 1G -f 2 2>&1 | tee "$OUT_DIR/allreduce_1node.txt"
$PY - "$OUT_DIR" <<'PY' | tee -a "$summary"
import sys
def busbw(path):
    out = {}
    for l in open(path):
        f = l.split()
        if len(f) >= 13 and f[0].isdigit():
            out[int(f[0])] = float(f[7])
    return out
d = sys.argv[1]
two, sock, one = (busbw(f"{d}/allreduce_{n}.txt") for n in ("2nodes", "2nodes_sockets", "1node"))
print(f"{'size(B)':>12} {'1node':>9} {'2nodes':>9} {'ratio':>7} {'sockets':>9} {'ratio':>7}")
for s in sorted(one):
    a, b, c = one[s], two.get(s, 0), sock.get(s, 0)
    print(f"{s:>12} {a:>9.2f} {b:>9.2f} {b/a:>7.3f} {c:>9.2f} {c/a:>7.3f}")
PY

say "## agent b killed while both ranks loop in all_reduce: time until the launcher exits"
for t in $(seq "$TRIALS"); do
  both_alive || { start_b; wait_both || break; }
  $L run $C -n 2 --gpus 1 --kill-timeout 2s -- $PY "$PWD/bench/gpu/allreduce_loop.py" >"$OUT_DIR/kill-$t.txt" 2>&1 &
  LPID=$!
  for _ in $(seq 600); do [ "$(grep -c looping "$OUT_DIR/kill-$t.txt")" = 2 ] && break; sleep 0.05; done
  t0=$(date +%s%N)
  kill -9 "$PID_B"
  wait "$LPID"; code=$?
  say "trial $t: launcher exit $code after $(ms "$t0") ms: $(grep 'muster: job' "$OUT_DIR/kill-$t.txt")"
  start_b; wait_both
done
