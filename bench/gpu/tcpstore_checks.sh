#!/usr/bin/env bash
# PyTorch against the TCPStore muster's agent serves: every TCPStore client
# method (tcpstore_client_check.py); init_process_group("nccl") and the DDP
# example under `launcher run --gpus 2`, on the embedded default and across
# two agents, with who listens on MASTER_PORT seen from a rank before
# init_process_group, after it and after the job; the DDP example again
# with --no-agent-store.
#
#   go build -o bin/ ./cmd/... && BIN=bin PYTHON=/opt/torch/.venv/bin/python bench/gpu/tcpstore_checks.sh   # writes under ${OUT:-/tmp/muster-tcpstore-checks}
set -u -o pipefail
cd "$(dirname "$0")/../.."
BIN=$(cd "${BIN:-bin}" && pwd)
L=$BIN/launcher A=$BIN/agent
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-/tmp/muster-tcpstore-checks}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
NV=$($PY -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$NV" ] && [ -e "$NV/lib/libnccl.so.2" ] && export MUSTER_NCCL_LIBRARY="$NV/lib/libnccl.so.2"
summary="$OUT_DIR/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "# $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | tr '\n' ';') torch $($PY -c 'import torch; print(torch.__version__)')"

say "## every TCPStore client method against the agent's store"
timeout 120 "$L" run --nproc 1 -- "$PY" bench/gpu/tcpstore_client_check.py >"$OUT_DIR/client.txt" 2>&1
say "exit $?"
tee -a "$summary" <"$OUT_DIR/client.txt"

# who.py: rank 0 names who listens on MASTER_PORT before init_process_group,
# after it and after an all_reduce; every rank checks the variable.
cat >"$OUT_DIR/who.py" <<'PY'
import glob, os, torch, torch.distributed as dist
port = int(os.environ["MASTER_PORT"])
def listeners(port):
    """The processes listening on TCP port, from /proc (no ss needed)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).readlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":  # 0A: LISTEN
                inodes.add(f[9])
    who = set()
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            pid = fd.split("/")[2]
            name = open(f"/proc/{pid}/comm").read().strip()
            who.add(f"pid {pid} ({name})" + (" - this rank" if int(pid) == os.getpid() else ""))
    return ", ".join(sorted(who)) or "nobody listens"
def who(when):
    if os.environ["RANK"] == "0":
        print(f"MASTER_PORT {port} {when}: {listeners(port)}", flush=True)
who("before init_process_group")
assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True", os.environ.get("TORCHELASTIC_USE_AGENT_STORE")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
who("after init_process_group")
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
who("after all_reduce")
print(f"rank {dist.get_rank()}: all_reduce {x[0].item():.0f} (world {dist.get_world_size()})", flush=True)
dist.destroy_process_group()
PY
say "## init_process_group(nccl) on the embedded default, --gpus 2"
timeout 120 "$L" run --gpus 2 -- "$PY" "$OUT_DIR/who.py" 2>&1 | tee "$OUT_DIR/who-embedded.txt" | tee -a "$summary"
say "exit ${PIPESTATUS[0]}"
port=$(sed -n 's/.*MASTER_PORT \([0-9]*\) before.*/\1/p' "$OUT_DIR/who-embedded.txt" | head -1)
hexport=$(printf '%04X' "${port:-0}")
say "after the job, MASTER_PORT $port: $(awk -v p=":$hexport" '$2 ~ p"$" && $4 == "0A"' /proc/net/tcp /proc/net/tcp6 | grep -q . && echo 'still listened on' || echo 'nobody listens')"

say "## the DDP example, --gpus 2, agent store"
timeout 180 "$L" run --gpus 2 -- "$PY" examples/ddp/train.py --steps 20 >"$OUT_DIR/ddp.txt" 2>&1
say "exit $?"; tail -3 "$OUT_DIR/ddp.txt" | tee -a "$summary"
say "## the DDP example, --gpus 2, --no-agent-store"
timeout 180 "$L" run --gpus 2 --no-agent-store -- "$PY" examples/ddp/train.py --steps 20 >"$OUT_DIR/ddp-no-agent-store.txt" 2>&1
say "exit $?"; tail -3 "$OUT_DIR/ddp-no-agent-store.txt" | tee -a "$summary"

say "## two agents, one GPU each: the store is node rank 0's agent's"
. bench/gpu/two_agents.sh
start_a; sleep 0.5; start_b; wait_both || exit 1
say "agent pids: a=$PID_A b=$PID_B; launcher runs as its own process"
timeout 120 "$L" run $C -n 2 --gpus 1 -- "$PY" "$OUT_DIR/who.py" 2>&1 | tee "$OUT_DIR/who-cluster.txt" | tee -a "$summary"
say "exit ${PIPESTATUS[0]}"
timeout 180 "$L" run $C -n 2 --gpus 1 -- "$PY" examples/ddp/train.py --steps 20 >"$OUT_DIR/ddp-cluster.txt" 2>&1
say "DDP example on two agents: exit $?"; tail -3 "$OUT_DIR/ddp-cluster.txt" | tee -a "$summary"
