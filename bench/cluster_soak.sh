#!/usr/bin/env bash
# Soaks a gossip cluster of N agents (default 8) on loopback addresses
# 127.0.0.1..N for DURATION seconds (default 600) while BURNERS busy loops
# (default: twice the CPUs) keep every CPU loaded, runs an N-node job every
# 30 s, and counts what memberlist suspected or declared dead (agents run
# with -v for its log) and the jobs that failed.
# Nobody should be declared dead.
#
#   go build -o bin/ ./cmd/... && BIN=bin bench/cluster_soak.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
BIN=$(cd "${BIN:-bin}" && pwd)
N=${N:-8} DURATION=${DURATION:-600} BURNERS=${BURNERS:-$(( 2 * $(nproc) ))}
D=$(mktemp -d)
export MUSTER_RANK_LOGS="$D/rank-logs"   # the agents keep their ranks' output with the rest
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$D/token"; chmod 600 "$D/token"
"$BIN/agent" -v --listen 127.0.0.1:29490 --bind 127.0.0.1:7990 --name n1 --socket "$D/sock" --token-file "$D/token" >"$D/n1.log" 2>&1 & pids+=($!)
sleep 0.5
for i in $(seq 2 "$N"); do
  "$BIN/agent" -v --join 127.0.0.1:7990 --bind "127.0.0.$i:7990" --name "n$i" --token-file "$D/token" >"$D/n$i.log" 2>&1 & pids+=($!)
done
L="$BIN/launcher"; C="--cluster unix://$D/sock"
for _ in $(seq 100); do [ "$($L nodes $C 2>/dev/null | awk '$4 == "alive"' | wc -l)" = "$N" ] && break; sleep 0.1; done
$L nodes $C
for _ in $(seq "$BURNERS"); do (while :; do :; done) & pids+=($!); done
echo "# $N agents, $BURNERS busy loops on $(nproc) CPUs, $DURATION s, from $(date -u +%FT%TZ)"
jobs_ok=0 jobs_failed=0
end=$(( SECONDS + DURATION ))
while [ "$SECONDS" -lt "$end" ]; do
  if $L run $C -n "$N" --nproc 1 --wait-timeout 0 -- true >/dev/null 2>"$D/job.err"; then
    jobs_ok=$((jobs_ok + 1))
  else
    jobs_failed=$((jobs_failed + 1)); cat "$D/job.err"
  fi
  sleep 30
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
dead=$(cat "$D"/n*.log | grep -c '"state":"dead"')
failed=$(cat "$D"/n*.log | grep -c 'as failed')
suspect=$(cat "$D"/n*.log | grep -c '"msg":"Suspect')
lost=$(cat "$D"/n*.log | grep -c 'peer lost')
alive=$($L nodes $C | awk '$4 == "alive"' | wc -l)
echo "load average $load; members marked failed $failed, suspicions $suspect (all agents); store saw dead $dead; peer-lost stops $lost; jobs ok $jobs_ok, failed $jobs_failed; alive at the end $alive of $N"
