#!/usr/bin/env bash
# On one host with eight GPUs (NGPU of them), in one run:
#   1. `launcher bench` allreduce, allgather and reducescatter under `launcher run --gpus NGPU`
#      next to nccl-tests' all_reduce_perf, all_gather_perf and reduce_scatter_perf -g NGPU,
#      both on the same NCCL: out-of-place busbw per size and the ratio muster/nccl-tests;
#   2. the DDP example under `launcher run --gpus NGPU`, and with --nproc NGPU/2 (two GPUs
#      a worker);
#   3. AGENTS agents on this host, GPUS_PER_AGENT GPUs each, on 127.0.0.1, 127.0.0.2, ...,
#      joined by gossip (`launcher run --cluster ... -n AGENTS --gpus GPUS_PER_AGENT`):
#      the DDP example; `launcher bench allreduce`, with its ratio to the one-node run of 1;
#      nccl-tests' all_reduce_perf built with MPI=1 under `--mpi openmpi`, next to
#      `mpirun -np NGPU` of the same binary; and, TRIALS times, one agent killed (SIGKILL)
#      while every rank loops in all_reduce: the time until the launcher exits and until no
#      worker is left, the agent started again between trials;
#   4. a trivial torch job (init, one all_reduce, exit) on NGPU ranks under `launcher run`,
#      under `torchrun --standalone`, and started by hand, interleaved, TRIALS runs each:
#      wall ms, the median of each and its ratio to by hand.
# nccl-tests is built here (plain, and with MPI=1 in a build directory of its own) from
# its source in NCCL_TESTS_SRC, against the NCCL of torch's nvidia-nccl wheel, which muster
# loads too (MUSTER_NCCL_LIBRARY). Every step has a time limit. Results, and every command's
# output, go under $OUT.
#
#   PYTHON=/opt/torch/.venv/bin/python bench/gpu/eight_gpu_checks.sh       # bin/ prebuilt: go build -o bin/ ./cmd/...
#   PYTHON=... NGPU=2 MAXBYTES=256M bench/gpu/eight_gpu_checks.sh          # a first try on two GPUs: two agents of one
#
# Settings, from the environment (defaults in brackets):
#   PYTHON        python with torch and the nvidia-nccl wheel [python3]
#   NGPU          GPUs used [all that nvidia-smi lists]
#   AGENTS, GPUS_PER_AGENT   agents of section 3 and GPUs each [4 and NGPU/4 from 8 GPUs; else NGPU and 1]
#   MAXBYTES      largest size of the sweeps, from 1M doubling [8G]
#   ITERS, WARMUP timed and warm-up iterations per size, both tools [20, 5]
#   CHECK         rounds of result checking, both tools [0: muster's bench checks on the host, slow at 8G]
#   TRIALS        runs of the kill test and of each start-up method [5]
#   SKIP          sections to leave out, any of: bench ddp cluster mpi kill trivial [none]
#   NCCL_TESTS_SRC, NCCL_TESTS_BUILD   nccl-tests' source and build directories [.dev/nccl-tests, its build/]
#   NVCC_GENCODE  [the first GPU's compute capability only]; CUDA_HOME [from nvcc on PATH];
#   MPI_HOME      [/usr/lib/x86_64-linux-gnu/openmpi]; BIN [bin]; OUT [/tmp/muster-8gpu]
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=$(cd "${BIN:-bin}" && pwd)
L=$BIN/launcher A=$BIN/agent
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-/tmp/muster-8gpu}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ "$NGPU" -ge 8 ]; then
  AGENTS=${AGENTS:-4}
else
  AGENTS=${AGENTS:-$NGPU}
fi
GPA=${GPUS_PER_AGENT:-$(( AGENTS > 0 ? NGPU / AGENTS : 0 ))}
NCL=$(( AGENTS * GPA ))   # ranks of the jobs on the agents
MAXBYTES=${MAXBYTES:-8G}
ITERS=${ITERS:-20} WARMUP=${WARMUP:-5} CHECK=${CHECK:-0}
TRIALS=${TRIALS:-5}
SKIP=${SKIP:-}
SRC=${NCCL_TESTS_SRC:-.dev/nccl-tests}
MPI_HOME=${MPI_HOME:-/usr/lib/x86_64-linux-gnu/openmpi}
STORE_PORT=${STORE_PORT:-29400}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
skipped() { case " $SKIP " in *" $1 "*) return 0 ;; esac; return 1; }
# tmo SECONDS CMD...: CMD under a time limit, SIGKILL 10 s after the SIGTERM.
tmo() { local s=$1; shift; timeout -k 10 "$s" "$@"; }
# A command's output is kept whole in its file; the summary gets its last lines.
tailsay() { tail -n "$1" "$2" | sed 's/^/    /' | tee -a "$summary"; }

if [ "$NGPU" -lt 1 ] || [ "$GPA" -lt 1 ] || [ "$NCL" -gt "$NGPU" ]; then
  say "NGPU=$NGPU AGENTS=$AGENTS GPUS_PER_AGENT=$GPA: need NGPU >= 1 and AGENTS x GPUS_PER_AGENT <= NGPU"
  exit 2
fi
if ! NV=$($PY -c 'import torch, nvidia.nccl as m; print(list(m.__path__)[0])'); then
  say "$PY lacks torch or the nvidia-nccl wheel: set PYTHON"
  exit 2
fi
# muster, torch and nccl-tests all load this NCCL.
export MUSTER_NCCL_LIBRARY=$NV/lib/libnccl.so.2
export LD_LIBRARY_PATH=$NV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SWEEP="-b 1M -e $MAXBYTES -f 2 -n $ITERS -w $WARMUP -c $CHECK"

say "# $(date -u +%FT%TZ) $(hostname) $(nvidia-smi -L 2>/dev/null | tr '\n' ';')"
say "# NGPU=$NGPU AGENTS=$AGENTS GPUS_PER_AGENT=$GPA MAXBYTES=$MAXBYTES ITERS=$ITERS WARMUP=$WARMUP CHECK=$CHECK TRIALS=$TRIALS SKIP=$SKIP"
say "# torch $($PY -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1)"
say "# MUSTER_NCCL_LIBRARY=$MUSTER_NCCL_LIBRARY"
say "# $(mpirun --version 2>/dev/null | head -1)"
say "# launcher $($L --version 2>&1 | head -1)"

# busbw_table LABEL_A FILE_A LABEL_B FILE_B: out-of-place busbw per size from two
# tables in nccl-tests' format ("[rank] " prefixes dropped), and B/A; then the mean
# of each over the sizes both have, and the ratio of the means.
busbw_table() {
  local la=$1 fa=$2 lb=$3 fb=$4
  printf "%14s %12s %12s %7s\n" "size(B)" "$la" "$lb" "ratio" | tee -a "$summary"
  awk '{ sub(/^\[[0-9]+\] /, "") }
       $1 ~ /^[0-9]+$/ && NF >= 12 { if (which == 1) a[$1] = $8; else b[$1] = $8; s[$1] = 1 }
       END { for (z in s) print z, (z in a) ? a[z] : "-", (z in b) ? b[z] : "-" }' which=1 "$fa" which=2 "$fb" |
    sort -n | awk '{ r = "-" }
       $2 != "-" && $3 != "-" { if ($2 > 0) r = sprintf("%.3f", $3 / $2); sa += $2; sb += $3; m++ }
       { printf "%14s %12s %12s %7s\n", $1, $2, $3, r }
       END { if (m) printf "%14s %12.2f %12.2f %7.3f\n", "mean", sa / m, sb / m, (sa > 0 ? sb / sa : 0)
             else print "no size in both: see the outputs" }' | tee -a "$summary"
}
avgbw() { sed 's/^\[[0-9]*\] //' "$1" | awk -F: '/Avg bus bandwidth/ {gsub(/ /, "", $2); print $2; f = 1} END {if (!f) print "-"}'; }

# ---- nccl-tests: built here, against the wheel's NCCL --------------------------------
PERF='' PERF_MPI=''
build_nccl_tests() {
  [ -f "$SRC/src/Makefile" ] || { say "no nccl-tests source in $SRC (NCCL_TESTS_SRC)"; return 1; }
  local src b cuda gencode cc nh
  src=$(cd "$SRC" && pwd)
  b=${NCCL_TESTS_BUILD:-$src/build}
  mkdir -p "$b" && b=$(cd "$b" && pwd)
  cuda=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  gencode=${NVCC_GENCODE:--gencode=arch=compute_${cc:-90},code=sm_${cc:-90}}
  # The wheel has libnccl.so.2 but no libnccl.so to link with: a NCCL_HOME of links.
  nh=$b/nccl-home
  mkdir -p "$nh/lib" && ln -sfn "$NV/include" "$nh/include" && ln -sf "$NV/lib/libnccl.so.2" "$nh/lib/libnccl.so"
  say "nccl-tests $(sed -n 's/^#define NCCL_TESTS_VERSION "\(.*\)"/\1/p' "$src/src/common.h") from $src, CUDA_HOME=$cuda NVCC_GENCODE=$gencode"
  local t0 j
  t0=$(date +%s%N)
  j=$(nproc)
  local mk=(make -j "$j" -C "$src/src" NCCL_HOME="$nh" CUDA_HOME="$cuda" NVCC_GENCODE="$gencode")
  local pids=()
  if ! skipped bench; then
    tmo 300 "${mk[@]}" BUILDDIR="$b/plain" "$b/plain/all_reduce_perf" "$b/plain/all_gather_perf" "$b/plain/reduce_scatter_perf" >"$OUT_DIR/build-nccl-tests.txt" 2>&1 &
    pids+=($!)
  fi
  if ! skipped mpi; then
    tmo 300 "${mk[@]}" BUILDDIR="$b/mpi" MPI=1 MPI_HOME="$MPI_HOME" "$b/mpi/all_reduce_perf" >"$OUT_DIR/build-nccl-tests-mpi.txt" 2>&1 &
    pids+=($!)
  fi
  local p code
  for p in "${pids[@]}"; do wait "$p"; code=$?; [ "$code" = 0 ] || say "a nccl-tests build failed (exit $code): see $OUT_DIR/build-nccl-tests*.txt"; done
  [ -x "$b/plain/all_reduce_perf" ] && PERF=$b/plain
  [ -x "$b/mpi/all_reduce_perf" ] && PERF_MPI=$b/mpi
  say "build: $(( $(ms "$t0") / 1000 )) s; plain: ${PERF:-none}; MPI=1: ${PERF_MPI:-none}"
}
if ! skipped bench || ! skipped mpi; then
  say "## nccl-tests build"
  build_nccl_tests
fi

# ---- 1. one node: launcher bench next to nccl-tests -----------------------------------
declare -A PERF_BIN=([allreduce]=all_reduce_perf [allgather]=all_gather_perf [reducescatter]=reduce_scatter_perf)
if ! skipped bench; then
  for coll in allreduce allgather reducescatter; do
    m="$OUT_DIR/bench_${coll}_muster.txt" n="$OUT_DIR/bench_${coll}_nccltests.txt"
    say ""
    say "## 1. $coll, $NGPU GPUs: launcher run --embedded --gpus $NGPU --no-tag-output -- launcher bench $coll $SWEEP"
    say "##    next to: ${PERF_BIN[$coll]} $SWEEP -g $NGPU"
    # shellcheck disable=SC2086 # SWEEP is words
    tmo 300 "$L" run --embedded --gpus "$NGPU" --no-tag-output -- "$L" bench "$coll" $SWEEP >"$m" 2>&1
    mc=$?
    if [ -n "$PERF" ]; then
      # shellcheck disable=SC2086
      tmo 300 "$PERF/${PERF_BIN[$coll]}" $SWEEP -g "$NGPU" >"$n" 2>&1
      nc=$?
    else
      nc="not built"; : >"$n"
    fi
    say "muster exit $mc (avg busbw $(avgbw "$m")), nccl-tests exit $nc (avg busbw $(avgbw "$n")); $(grep -m1 -o 'nccl-headers=[0-9]* nccl-library=[0-9]*' "$n")"
    busbw_table nccl-tests "$n" muster "$m"
  done
fi

# ---- 2. the DDP example on one node ---------------------------------------------------
if ! skipped ddp; then
  NP=$(( NGPU / 2 > 0 ? NGPU / 2 : 1 ))
  say ""
  say "## 2. DDP example: launcher run --embedded --gpus $NGPU -- $PY examples/ddp/train.py --steps 20"
  tmo 120 "$L" run --embedded --gpus "$NGPU" -- "$PY" examples/ddp/train.py --steps 20 >"$OUT_DIR/ddp_gpus.txt" 2>&1
  say "exit $?"
  tailsay 3 "$OUT_DIR/ddp_gpus.txt"
  say "## 2. DDP example: launcher run --embedded --gpus $NGPU --nproc $NP -- $PY examples/ddp/train.py --steps 20"
  # shellcheck disable=SC2016 # expanded by the workers
  tmo 60 "$L" run --embedded --gpus "$NGPU" --nproc "$NP" -- sh -c 'echo "local rank $LOCAL_RANK: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES MUSTER_LOCAL_GPUS=$MUSTER_LOCAL_GPUS"' 2>&1 | sort | tee -a "$summary"
  tmo 120 "$L" run --embedded --gpus "$NGPU" --nproc "$NP" -- "$PY" examples/ddp/train.py --steps 20 >"$OUT_DIR/ddp_nproc.txt" 2>&1
  say "exit $?"
  tailsay 3 "$OUT_DIR/ddp_nproc.txt"
fi

# ---- 3. AGENTS agents on this host, joined by gossip ---------------------------------
D=$(mktemp -d)
declare -a APID=()
stop_agents() {
  local p
  for p in "${APID[@]}"; do kill "$p" 2>/dev/null; done
  # Waited for: a next run takes the same addresses and ports.
  for p in "${APID[@]}"; do wait "$p" 2>/dev/null; done
  APID=()
}
trap 'stop_agents; rm -rf "$D"' EXIT
C=(--cluster "unix://$D/sock")
# start_agent I: agent nI on 127.0.0.(I+1) with GPUs I*GPA ..; n0 hosts the store.
# Each "node" has a session directory of its own for Open MPI's daemons (in the
# agent's environment, which its workers inherit): on one host they would all
# make the same one at once, and Open MPI 4.1 fails on that race ("A call to
# mkdir was unable to create the desired directory ... File exists").
start_agent() {
  local i=$1 devs
  devs=$(seq -s, $(( i * GPA )) $(( i * GPA + GPA - 1 )))
  mkdir -p "$D/ompi-n$i"
  export OMPI_MCA_orte_tmpdir_base=$D/ompi-n$i
  if [ "$i" = 0 ]; then
    "$A" --listen "127.0.0.1:$STORE_PORT" --bind 127.0.0.1 --name n0 --gpu-devices "$devs" --socket "$D/sock" --token-file "$D/token" >>"$OUT_DIR/agent-0.log" 2>&1 &
  else
    "$A" --join 127.0.0.1 --bind "127.0.0.$(( i + 1 ))" --name "n$i" --gpu-devices "$devs" --token-file "$D/token" >>"$OUT_DIR/agent-$i.log" 2>&1 &
  fi
  APID[i]=$!
  unset OMPI_MCA_orte_tmpdir_base
}
# all_alive: every agent alive in gossip with all its GPUs free.
all_alive() { [ "$("$L" nodes "${C[@]}" 2>/dev/null | awk -v g="$GPA" '$4 == "alive" && $6 == g' | wc -l)" = "$AGENTS" ]; }
wait_all() {
  local _
  for _ in $(seq 300); do all_alive && return 0; sleep 0.1; done
  say "agents not all alive with $GPA free GPUs after 30 s:"
  "$L" nodes "${C[@]}" 2>&1 | tee -a "$summary"
  return 1
}

if ! skipped cluster || ! skipped mpi || ! skipped kill; then
  say ""
  say "## 3. $AGENTS agents x $GPA GPUs on this host, joined by gossip"
  $PY -c 'import secrets; print(secrets.token_hex(16))' >"$D/token" && chmod 600 "$D/token"
  start_agent 0
  sleep 0.5
  for i in $(seq 1 $(( AGENTS - 1 ))); do start_agent "$i"; done
  if wait_all; then
    "$L" nodes "${C[@]}" | tee -a "$summary"
    RUNC=("$L" run "${C[@]}" -n "$AGENTS" --gpus "$GPA")

    if ! skipped cluster; then
      say "## 3. DDP example: launcher run --cluster ... -n $AGENTS --gpus $GPA -- $PY examples/ddp/train.py --steps 20"
      tmo 120 "${RUNC[@]}" -- "$PY" examples/ddp/train.py --steps 20 >"$OUT_DIR/cluster_ddp.txt" 2>&1
      say "exit $?"
      tailsay 3 "$OUT_DIR/cluster_ddp.txt"

      say "## 3. allreduce: launcher run --cluster ... -n $AGENTS --gpus $GPA --no-tag-output -- launcher bench allreduce $SWEEP"
      # shellcheck disable=SC2086
      tmo 300 "${RUNC[@]}" --no-tag-output -- "$L" bench allreduce $SWEEP >"$OUT_DIR/cluster_bench_allreduce.txt" 2>&1
      say "exit $? (avg busbw $(avgbw "$OUT_DIR/cluster_bench_allreduce.txt"))"
      if skipped bench; then
        busbw_table "-" /dev/null "${AGENTS}agents" "$OUT_DIR/cluster_bench_allreduce.txt"
      else
        say "next to the one-node run of 1 ($NGPU GPUs):"
        busbw_table "1node" "$OUT_DIR/bench_allreduce_muster.txt" "${AGENTS}agents" "$OUT_DIR/cluster_bench_allreduce.txt"
      fi
    fi

    if ! skipped mpi; then
      say "## 3. nccl-tests MPI=1 all_reduce_perf $SWEEP -g 1: launcher run --cluster ... -n $AGENTS --gpus $GPA --mpi openmpi, then mpirun -np $NCL"
      if [ -n "$PERF_MPI" ]; then
        CVD=$(seq -s, 0 $(( NCL - 1 )))
        # The "nodes" share this host's name: Open MPI's shared-memory transport would
        # take them for one, so MPI's own traffic goes over TCP (NCCL's does not use it);
        # nccl-tests counts its local ranks by host name and picks the GPU of its local
        # rank, so every rank sees all the job's GPUs, as under mpirun. Each "node" would
        # bind its ranks to the host's first cores: binding is off, for both.
        # shellcheck disable=SC2086
        tmo 300 "${RUNC[@]}" --mpi openmpi -x OMPI_MCA_btl=self,tcp -x CUDA_VISIBLE_DEVICES="$CVD" -x OMPI_MCA_hwloc_base_binding_policy=none \
          -x OMPI_ALLOW_RUN_AS_ROOT=1 -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
          -- "$PERF_MPI/all_reduce_perf" $SWEEP -g 1 >"$OUT_DIR/mpi_muster.txt" 2>&1
        say "muster --mpi openmpi: exit $? (avg busbw $(avgbw "$OUT_DIR/mpi_muster.txt"))"
        # shellcheck disable=SC2086
        tmo 300 mpirun -np "$NCL" --mca btl self,tcp --bind-to none -x CUDA_VISIBLE_DEVICES="$CVD" -x LD_LIBRARY_PATH \
          "$PERF_MPI/all_reduce_perf" $SWEEP -g 1 >"$OUT_DIR/mpi_mpirun.txt" 2>&1
        say "mpirun -np $NCL: exit $? (avg busbw $(avgbw "$OUT_DIR/mpi_mpirun.txt"))"
        busbw_table mpirun "$OUT_DIR/mpi_mpirun.txt" muster "$OUT_DIR/mpi_muster.txt"
      else
        say "no MPI=1 all_reduce_perf: see $OUT_DIR/build-nccl-tests-mpi.txt"
      fi
    fi

    if ! skipped kill; then
      V=$(( AGENTS - 1 ))
      say "## 3. agent n$V killed (SIGKILL) while all $NCL ranks loop in all_reduce: launcher run --cluster ... -n $AGENTS --gpus $GPA --kill-timeout 2s"
      say "##    ms from the kill to the launcher's exit, and to no worker left (each worker's pid)"
      mkdir -p "$D/pids"
      # Each worker wrote its pid: those still alive.
      pids() { local f; for f in "$D"/pids/*; do [ -e "$f" ] && head -1 "$f"; done; }
      workers() { local n=0 p; for p in $(pids); do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done; echo $n; }
      for t in $(seq "$TRIALS"); do
        wait_all || break
        log="$OUT_DIR/kill-$t.txt"
        rm -f "$D/end" "$D/code" "$D"/pids/*
        ( tmo 120 "${RUNC[@]}" --kill-timeout 2s -- "$PY" "$PWD/bench/gpu/allreduce_loop.py" "$D/pids" >"$log" 2>&1
          echo $? >"$D/code"; date +%s%N >"$D/end" ) &
        sub=$!
        for _ in $(seq 1200); do [ "$(grep -c looping "$log")" -ge "$NCL" ] && break; [ -e "$D/end" ] && break; sleep 0.05; done
        looping=$(grep -c looping "$log")
        t0=$(date +%s%N)
        kill -9 "${APID[V]}"
        gone=
        for _ in $(seq 3000); do
          [ -z "$gone" ] && [ "$(workers)" = 0 ] && gone=$(ms "$t0")
          [ -n "$gone" ] && [ -e "$D/end" ] && break
          sleep 0.02
        done
        wait "$sub"
        wait "${APID[V]}" 2>/dev/null
        exit_ms=NA
        [ -e "$D/end" ] && exit_ms=$(( ($(cat "$D/end") - t0) / 1000000 ))
        say "trial $t: $looping/$NCL looping, $(ls "$D/pids" | wc -l) pids; launcher exit $(cat "$D/code" 2>/dev/null || echo NA) after $exit_ms ms; no worker left after ${gone:-NA(>60 s)} ms; now $(workers) left; $(grep -m1 'muster: job' "$log")"
        for p in $(pids); do kill -9 "$p" 2>/dev/null; done
        start_agent "$V"
        wait_all || break
      done
    fi
  fi
  stop_agents
fi

# ---- 4. a trivial torch job: launcher run, torchrun, by hand --------------------------
if ! skipped trivial; then
  W=bench/gpu/torch_allreduce.py
  say ""
  say "## 4. trivial torch job ($W --trivial) on $NGPU ranks, $TRIALS runs each, interleaved: wall ms"
  say "##    launcher run --embedded --gpus $NGPU | $PY -m torch.distributed.run --standalone --nproc-per-node $NGPU | by hand: $NGPU processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT"
  hand() {
    local port=$1 r p rc=0 pids=()
    for r in $(seq 0 $(( NGPU - 1 ))); do
      RANK=$r WORLD_SIZE=$NGPU LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NGPU MASTER_ADDR=127.0.0.1 MASTER_PORT=$port tmo 120 "$PY" "$W" --trivial &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    return "$rc"
  }
  : >"$OUT_DIR/trivial.txt"
  for t in $(seq "$TRIALS"); do
    line="trial $t:"
    for how in muster torchrun hand; do
      log="$OUT_DIR/trivial-$how-$t.txt"
      t0=$(date +%s%N)
      case $how in
        muster) tmo 120 "$L" run --embedded --gpus "$NGPU" -- "$PY" "$W" --trivial >"$log" 2>&1 ;;
        torchrun) tmo 120 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" "$W" --trivial >"$log" 2>&1 ;;
        hand) hand $(( 29700 + t )) >"$log" 2>&1 ;;
      esac
      code=$? took=$(ms "$t0")
      echo "$how $took $code" >>"$OUT_DIR/trivial.txt"
      line="$line $how $took ms (exit $code)"
    done
    say "$line"
  done
  # median HOW: of the runs that exited 0.
  median() { awk -v h="$1" '$1 == h && $3 == 0 {print $2}' "$OUT_DIR/trivial.txt" | sort -n |
    awk '{x[NR] = $1} END {if (NR == 0) print "NA"; else if (NR % 2) print x[(NR + 1) / 2]; else print (x[NR / 2] + x[NR / 2 + 1]) / 2}'; }
  mh=$(median hand)
  for how in muster torchrun hand; do
    md=$(median "$how")
    ok=$(awk -v h="$how" '$1 == h && $3 == 0' "$OUT_DIR/trivial.txt" | wc -l)
    say "$(awk -v h="$how" -v m="$md" -v b="$mh" -v n="$ok" -v t="$TRIALS" 'BEGIN {
      r = (m != "NA" && b != "NA" && b > 0) ? sprintf("%.2f", m / b) : "-"
      printf "%-9s median %6s ms (%d of %d runs exited 0); ratio to by hand %s", h, m, n, t, r }')"
  done
fi
say ""
say "# done $(date -u +%FT%TZ) after $SECONDS s; outputs in $OUT_DIR"
