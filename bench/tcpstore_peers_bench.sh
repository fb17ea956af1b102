#!/usr/bin/env bash
# The TCPStore load test (bench/tcpstoreload: N clients join at once:
# connect, VALIDATE, PING, ADD, the last SETs, all WAIT) against the store
# node rank 0's agent serves for a two-node job, run by two builds of
# muster in turn: OLD_BIN (say, the previous commit's) and NEW_BIN. The two
# nodes are network namespaces on one bridge, as the end-to-end tests make
# them, with fresh ones and fresh agents for every run. Cases:
#
#   remote  the N clients are node rank 1's worker: every connection comes
#           from another of the job's nodes;
#   local   the N clients are node rank 0's worker, on the store's own node.
#
# Writes per-run lines and, per case, the medians and their ratio new/old to
# summary.txt under ${OUT:-/tmp/muster-tcpstore-peers}, beside each run's
# output and its agents' logs (MUSTER_VERBOSE=1: each question about
# connections, in agent a's). Needs root.
#
#   go build -o bin/ ./cmd/... ./bench/tcpstoreload
#   git worktree add /tmp/old HEAD~1 && (cd /tmp/old && go build -o bin/ ./cmd/... ./bench/tcpstoreload)
#   OLD_BIN=/tmp/old/bin NEW_BIN=bin bench/tcpstore_peers_bench.sh
#
# CLIENTS (default 10000), RUNS (default 5), DIALERS (default 10000: every
# client at once, as ranks start), CASES (default "remote local").
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
set -u -o pipefail
cd "$(dirname "$0")/.."
OLD_BIN=$(cd "${OLD_BIN:?set OLD_BIN to the bin directory of the old build}" && pwd)
NEW_BIN=$(cd "${NEW_BIN:-bin}" && pwd)
CLIENTS=${CLIENTS:-10000}
RUNS=${RUNS:-5}
DIALERS=${DIALERS:-10000}
CASES=${CASES:-"remote local"}
OUT_DIR=${OUT:-/tmp/muster-tcpstore-peers}
mkdir -p "$OUT_DIR"
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

P=mtsp$$ # namespace names: $P-sw, $P-a, $P-b
NET=10.231.$(($$ % 250))
A=$NET.1
WORK=$(mktemp -d)
trap 'down; rm -rf "$WORK"' EXIT

# up: the bridge's namespace and hosts a and b on it.
up() {
  ip netns add "$P-sw" && ip -n "$P-sw" link add br0 type bridge && ip -n "$P-sw" link set br0 up || return 1
  local i=1 h
  for h in a b; do
    ip netns add "$P-$h" || return 1
    ip link add eth0 netns "$P-$h" type veth peer name "$h" netns "$P-sw" || return 1
    ip -n "$P-sw" link set dev "$h" master br0 up
    ip -n "$P-$h" addr add "$NET.$i/24" dev eth0
    ip -n "$P-$h" link set eth0 up
    ip -n "$P-$h" link set lo up
    # Room for every client's port, run after run.
    ip netns exec "$P-$h" sysctl -qw net.ipv4.ip_local_port_range="1024 65000"
    i=$((i + 1))
  done
}

# down: the agents (SIGTERM, then at most 10 s), whatever else runs in the
# namespaces, then the namespaces.
AGENTS=()
down() {
  local ns pid
  for pid in "${AGENTS[@]}"; do kill "$pid" 2>/dev/null; done
  for _ in $(seq 100); do
    local alive=
    for pid in "${AGENTS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  AGENTS=()
  for ns in "$P-a" "$P-b" "$P-sw"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}

"$NEW_BIN/launcher" certs --dir "$WORK" "$A" >/dev/null || exit 1
echo 0123456789abcdef0123456789abcdef >"$WORK/token" && chmod 600 "$WORK/token"
CLUSTER=(--cluster "$A:29400" --token-file "$WORK/token" --tls-ca "$WORK/ca.pem")

# agent BIN HOST ARGS...: an agent on host a or b, with a directory of its own.
agent() {
  local bin=$1 h=$2
  shift 2
  local dir="$WORK/agent-$h"
  rm -rf "$dir" && mkdir -p "$dir"
  ip netns exec "$P-$h" env -u MUSTER_SOCKET TMPDIR="$dir" MUSTER_DATA_DIR= \
    "$bin/agent" --name "$h" --kill-timeout 2s --rank-logs "$dir/rank-logs" --token-file "$WORK/token" --tls-ca "$WORK/ca.pem" "$@" \
    >"$dir/log" 2>&1 &
  AGENTS+=($!)
  disown
}

# run_once BIN CASE I LOG: one job whose worker on the case's node is the load.
run_once() {
  local bin=$1 case=$2 i=$3 log=$4 loader=1
  [ "$case" = local ] && loader=0
  down
  up || { echo "no network namespaces" >"$log"; return; }
  agent "$bin" a --listen "$A:29400" --tls-cert "$WORK/store.pem" --tls-key "$WORK/store-key.pem" --socket "$WORK/agent-a.sock"
  agent "$bin" b --join "$A"
  local ok=
  for _ in $(seq 100); do
    if ip netns exec "$P-a" "$bin/launcher" run "${CLUSTER[@]}" -n 2 --wait-timeout 0 -- true >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
  done
  if [ -z "$ok" ]; then echo "the agents did not come up" >"$log"; cat "$WORK"/agent-*/log >>"$log"; return; fi
  ip netns exec "$P-a" "$bin/launcher" run "${CLUSTER[@]}" -H a,b --no-tag-output -- sh -c \
    "if [ \"\$RANK\" = $loader ]; then exec $NEW_BIN/tcpstoreload -clients $CLIENTS -dialers $DIALERS -key run$i; fi" >"$log" 2>&1
  # The agents' CPU time (user+system, ms) over the two jobs, and their own
  # word on refused connections, should any be.
  local pid cpu=
  for pid in "${AGENTS[@]}"; do
    cpu="$cpu $(awk -v t="$(getconf CLK_TCK)" '{print ($14+$15)*1000/t}' "/proc/$pid/stat" 2>/dev/null)"
  done
  echo "agent_cpu_ms a,b:$cpu" >>"$log"
  grep -h "TCPStore connection refused" "$WORK"/agent-*/log >>"$log"
  cp "$WORK/agent-a/log" "$log.agent-a"; cp "$WORK/agent-b/log" "$log.agent-b"
}

# line LOG: the load generator's result line, or NA.
line() { grep -o 'clients=[0-9]* connect_ms=[0-9.]* total_ms=[0-9.]*' "$1" | head -1 || echo NA; }
total() { echo "$1" | sed -n 's/.*total_ms=\([0-9.]*\).*/\1/p'; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "NA"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

say "# $(date -u +%FT%TZ) $(nproc) cores, ulimit -n $(ulimit -n), $CLIENTS clients, $DIALERS dialers; old $OLD_BIN, new $NEW_BIN"
for case in $CASES; do
  : >"$OUT_DIR/old-$case.totals"; : >"$OUT_DIR/new-$case.totals"
  for i in $(seq "$RUNS"); do
    for build in old new; do
      bin=$OLD_BIN; [ "$build" = new ] && bin=$NEW_BIN
      log="$OUT_DIR/$build-$case-$i.log"
      run_once "$bin" "$case" "$i" "$log"
      l=$(line "$log")
      say "$build $case run=$i $l"
      t=$(total "$l"); [ -n "$t" ] && echo "$t" >>"$OUT_DIR/$build-$case.totals"
    done
  done
  om=$(median <"$OUT_DIR/old-$case.totals"); nm=$(median <"$OUT_DIR/new-$case.totals")
  ratio=$(awk -v n="$nm" -v o="$om" 'BEGIN {if (n == "NA" || o == "NA" || o == 0) print "NA"; else printf "%.2f", n/o}')
  say "$case: median total_ms old=$om new=$nm ratio new/old=$ratio"
done
down
