#!/usr/bin/env bash
# TCPStore under a crowd: N clients join at once (connect, VALIDATE, PING,
# ADD, the last one SETs, all WAIT), played by bin/tcpstoreload, against
# PyTorch's own libuv TCPStore server and against the store muster's agent
# hosts for a job (the worker's MASTER_ADDR/MASTER_PORT). Same load binary
# and arguments for both, a fresh server per run (a new python process, a new
# job), the two interleaved. Writes per-run lines and, per N, the medians and
# their ratio muster/torch to summary.txt.
#
#   go build -o bin/ ./cmd/... ./bench/tcpstoreload && BIN=bin bench/gpu/tcpstore_bench.sh   # writes under ${OUT:-/tmp/muster-tcpstore}
#
# CLIENTS (default "1000 10000"), RUNS (default 5), PYTHON (default
# /opt/torch/.venv/bin/python).
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
PY=${PYTHON:-/opt/torch/.venv/bin/python}
CLIENTS=${CLIENTS:-"1000 10000"}
RUNS=${RUNS:-5}
DIALERS=${DIALERS:-256}
OUT_DIR=${OUT:-/tmp/muster-tcpstore}
mkdir -p "$OUT_DIR"
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

# The torch server: a free port, its fd limit raised, "ready PORT" once up.
TORCH_SERVER='
import resource, socket, time
from datetime import timedelta
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", port, is_master=True, use_libuv=True,
                      wait_for_workers=False, timeout=timedelta(seconds=300))
print("ready", port, flush=True)
while True:
    time.sleep(3600)
'
TPID=
trap '[ -n "$TPID" ] && kill $TPID 2>/dev/null' EXIT

# line LOG: the load generator's result line, or NA.
line() { grep -o 'clients=[0-9]* connect_ms=[0-9.]* total_ms=[0-9.]*' "$1" | head -1 || echo NA; }
# total LINE: its total_ms.
total() { echo "$1" | sed -n 's/.*total_ms=\([0-9.]*\).*/\1/p'; }
# median: of the numbers on stdin.
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "NA"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

run_torch() { # N I LOG
  "$PY" -c "$TORCH_SERVER" >"$3.server" 2>&1 &
  TPID=$!
  local port=
  for _ in $(seq 300); do
    port=$(awk '/^ready /{print $2}' "$3.server")
    [ -n "$port" ] && break
    kill -0 $TPID 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "torch server did not come up" >"$3"; cat "$3.server" >>"$3"
  else
    "$BIN/tcpstoreload" -addr "127.0.0.1:$port" -clients "$1" -dialers "$DIALERS" -key "run$2" >"$3" 2>&1
  fi
  kill $TPID 2>/dev/null; wait $TPID 2>/dev/null; TPID=
}

run_muster() { # N I LOG
  "$BIN/launcher" run --nproc 1 -- "$BIN/tcpstoreload" -clients "$1" -dialers "$DIALERS" -key "run$2" >"$3" 2>&1
}

say "# $(date -u +%FT%TZ) $(nproc) cores, ulimit -n $(ulimit -n), somaxconn $(cat /proc/sys/net/core/somaxconn), $DIALERS dialers, torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
for n in $CLIENTS; do
  : >"$OUT_DIR/torch-$n.totals"; : >"$OUT_DIR/muster-$n.totals"
  for i in $(seq "$RUNS"); do
    for server in torch muster; do
      log="$OUT_DIR/$server-$n-$i.log"
      "run_$server" "$n" "$i" "$log"
      l=$(line "$log")
      say "$server N=$n run=$i $l"
      t=$(total "$l"); [ -n "$t" ] && echo "$t" >>"$OUT_DIR/$server-$n.totals"
    done
  done
  tm=$(median <"$OUT_DIR/torch-$n.totals"); mm=$(median <"$OUT_DIR/muster-$n.totals")
  ratio=$(awk -v m="$mm" -v t="$tm" 'BEGIN {if (m == "NA" || t == "NA" || t == 0) print "NA"; else printf "%.2f", m/t}')
  say "N=$n median total_ms torch=$tm muster=$mm ratio muster/torch=$ratio"
done
