#!/usr/bin/env bash
# nccl-tests built with MPI=1 (Open MPI), across two agents on one host that
# offer one GPU each, started by muster (`launcher run --mpi openmpi`: mpirun on
# node rank 0, the agents as its remote shell), next to `mpirun -np 2` of the
# same binary on the same two GPUs. Prints busbw per size for both, and the ratio.
#
#   go build -o bin/ ./cmd/... && BIN=bin ALL_REDUCE_PERF=/path/all_reduce_perf bench/gpu/mpi_checks.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
L=$BIN/launcher A=$BIN/agent
PERF=${ALL_REDUCE_PERF:?set ALL_REDUCE_PERF to an all_reduce_perf built with MPI=1}
ARGS=${PERF_ARGS:--b 1M -e 8G -f 4 -g 1}
OUT_DIR=${OUT:-/tmp/muster-mpi}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

. bench/gpu/two_agents.sh
start_a; sleep 0.5; start_b; wait_both || exit 1

say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';') $(mpirun --version 2>&1 | head -1)"
# Both "nodes" share this host's name: Open MPI's shared-memory transport would
# take them for one, so MPI's own traffic goes over TCP (NCCL's does not use
# it); and nccl-tests counts its local ranks by host name and picks the GPU of
# its local rank, so both ranks see both GPUs, as under mpirun. Each "node"
# would bind its one rank to the host's first core: binding is off, for both.
$L run $C -n 2 --gpus 1 --mpi openmpi -x OMPI_MCA_btl=self,tcp -x CUDA_VISIBLE_DEVICES=0,1 -x OMPI_MCA_hwloc_base_binding_policy=none \
  -x OMPI_ALLOW_RUN_AS_ROOT=1 -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  -- "$PERF" $ARGS >"$OUT_DIR/muster.txt" 2>&1
say "muster --mpi openmpi: exit $?"
mpirun -np 2 --mca btl self,tcp --bind-to none -x CUDA_VISIBLE_DEVICES=0,1 "$PERF" $ARGS >"$OUT_DIR/mpirun.txt" 2>&1
say "mpirun -np 2: exit $?"
# busbw SIZE: out-of-place busbw by size, from nccl-tests' table.
busbw() { sed 's/^\[[0-9]*\] //' "$1" | awk '$1 ~ /^[0-9]+$/ && NF >= 12 {print $1, $8}' | sort; }
join <(busbw "$OUT_DIR/muster.txt") <(busbw "$OUT_DIR/mpirun.txt") | sort -n |
  awk '{printf "%12d bytes: muster %8.2f GB/s  mpirun %8.2f GB/s  ratio %.3f\n", $1, $2, $3, ($3 > 0 ? $2/$3 : 0)}' | tee -a "$summary"
grep -h "Avg bus bandwidth" "$OUT_DIR/muster.txt" "$OUT_DIR/mpirun.txt" | tee -a "$summary"
