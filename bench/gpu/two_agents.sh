# shellcheck shell=bash
# Two agents on this host, each offering one GPU on its own address, joined
# by gossip: "a" (GPU 0, 127.0.0.1) hosts the store and serves $D/sock, "b"
# (GPU 1, 127.0.0.2) joins. Sourced by the scripts that need them, after they
# set A (agent), L (launcher) and OUT_DIR (and GPUS_A, GPUS_B: other GPUs
# for each, as a --gpu-devices list); they get C (the --cluster flag),
# start_a, start_b, wait_both and the agents stopped, and waited for, at exit.
D=$(mktemp -d)
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$D/token" && chmod 600 "$D/token"
C="--cluster unix://$D/sock"
PID_A='' PID_B=''
start_a() { $A --listen 127.0.0.1:29400 --bind 127.0.0.1 --name a --gpu-devices "${GPUS_A:-0}" --socket "$D/sock" --token-file "$D/token" >>"$OUT_DIR/agent-a.log" 2>&1 & PID_A=$!; }
start_b() { $A --join 127.0.0.1 --bind 127.0.0.2 --name b --gpu-devices "${GPUS_B:-1}" --token-file "$D/token" >>"$OUT_DIR/agent-b.log" 2>&1 & PID_B=$!; }
both_alive() { [ "$($L nodes $C 2>/dev/null | awk -v g="$(echo "${GPUS_A:-0}" | tr ',' '\n' | wc -l)" '$4 == "alive" && $5 == g' | wc -l)" = 2 ]; }
wait_both() { for _ in $(seq 100); do both_alive && return 0; sleep 0.1; done; echo "agents did not come up" >&2; return 1; }
# The agents are waited for: a next run takes the same ports.
trap 'kill $PID_A $PID_B 2>/dev/null; wait $PID_A $PID_B 2>/dev/null; rm -rf "$D"' EXIT
