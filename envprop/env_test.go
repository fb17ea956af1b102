package envprop

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func twoNodes() Input {
	return Input{
		JobID:       "j-1",
		StoreAddr:   "10.0.0.1:29400",
		Hostfile:    "/tmp/j-1/hostfile",
		NodeAddrs:   []string{"10.0.0.1", "10.0.0.2"},
		NProc:       2,
		MasterAddr:  "10.0.0.1",
		MasterPort:  29500,
		NCCLCommID:  "10.0.0.1:29501",
		UniqueIDHex: strings.Repeat("ab", 128),
		GPUs:        []int{4, 5, 6, 7},
		MaxRestarts: 3,
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Input)
		want   map[string]string // "" value with absent=true below means unset
		absent []string
	}{
		{
			name: "rank 0 on node 0",
			edit: func(in *Input) {},
			want: map[string]string{
				"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
				"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "4", "ROLE_NAME": "default",
				"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
				"TORCHELASTIC_RUN_ID": "j-1", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "3",
				"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "OMP_NUM_THREADS": "1",
				"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "0",
				"MUSTER_JOB_ID": "j-1", "MUSTER_NODE_RANK": "0", "MUSTER_NNODES": "2",
				"MUSTER_NODE_ADDRS": "10.0.0.1 10.0.0.2", "MUSTER_MASTER_ADDR": "10.0.0.1",
				"MUSTER_GPUS_PER_NODE": "4", "MUSTER_NCCL_UNIQUE_ID": strings.Repeat("ab", 128),
				"MUSTER_HOSTFILE": "/tmp/j-1/hostfile", "MUSTER_STORE_ADDR": "10.0.0.1:29400",
				"CUDA_VISIBLE_DEVICES": "4,5,6,7", "MUSTER_LOCAL_GPUS": "4,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
				"NCCL_COMM_ID": "10.0.0.1:29501",
			},
		},
		{
			name: "a hang timeout: a heartbeat file per rank, Python's and PyTorch's dumps",
			edit: func(in *Input) {
				in.NodeRank, in.LocalRank = 1, 1
				in.Hang = &Hang{Dir: "/run/muster/jobs/muster-j-1.1", TraceDir: "/logs/j-1"}
			},
			want: map[string]string{
				"MUSTER_HEARTBEAT_FILE": "/run/muster/jobs/muster-j-1.1/heartbeat-3", "PYTHONFAULTHANDLER": "1",
				"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_INCLUDE_STACK_TRACE": "0",
				"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/muster/jobs/muster-j-1.1/nccl-dump-rank-",
				"TORCH_FR_DUMP_TEMP_FILE":         "/logs/j-1/nccl-trace-rank-", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/logs/j-1/nccl-trace-rank-",
			},
		},
		{
			name: "a hang timeout keeps what the user set for Python and PyTorch",
			edit: func(in *Input) {
				in.Hang = &Hang{Dir: "/d", TraceDir: "/logs/j-1"}
				in.Base = []string{"TORCH_FR_BUFFER_SIZE=0", "PYTHONFAULTHANDLER=", "MUSTER_HEARTBEAT_FILE=/stale"}
				in.User = []string{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/mine/trace-"}
			},
			want: map[string]string{
				"MUSTER_HEARTBEAT_FILE": "/d/heartbeat-0", "PYTHONFAULTHANDLER": "", "TORCH_FR_BUFFER_SIZE": "0",
				"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/mine/trace-",
			},
			absent: []string{"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"},
		},
		{
			name:   "no hang timeout, no heartbeat file",
			edit:   func(in *Input) {},
			absent: []string{"MUSTER_HEARTBEAT_FILE", "PYTHONFAULTHANDLER", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"},
		},
		{
			name: "local rank 1 on node 1 sees the same GPU list and no NCCL_COMM_ID",
			edit: func(in *Input) { in.NodeRank, in.LocalRank = 1, 1 },
			want: map[string]string{
				"RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "OMPI_COMM_WORLD_NODE_RANK": "1",
				"CUDA_VISIBLE_DEVICES": "4,5,6,7", "MUSTER_LOCAL_GPUS": "6,7",
			},
			absent: []string{"NCCL_COMM_ID"},
		},
		{
			name: "isolated GPUs",
			edit: func(in *Input) { in.LocalRank, in.IsolateGPUs = 1, true },
			want: map[string]string{"CUDA_VISIBLE_DEVICES": "6,7", "MUSTER_LOCAL_GPUS": "6,7"},
		},
		{
			name: "one GPU per worker",
			edit: func(in *Input) { in.NProc, in.LocalRank = 4, 3 },
			want: map[string]string{"CUDA_VISIBLE_DEVICES": "4,5,6,7", "MUSTER_LOCAL_GPUS": "7", "RANK": "3", "WORLD_SIZE": "8"},
		},
		{
			name:   "no GPUs hides them and one worker sets no OMP_NUM_THREADS",
			edit:   func(in *Input) { in.GPUs, in.NProc = nil, 1 },
			want:   map[string]string{"CUDA_VISIBLE_DEVICES": "", "MUSTER_GPUS_PER_NODE": "0", "WORLD_SIZE": "2"},
			absent: []string{"MUSTER_LOCAL_GPUS", "OMP_NUM_THREADS", "CUDA_DEVICE_ORDER"},
		},
		{
			name: "inherited rank variables are replaced, inherited defaults kept",
			edit: func(in *Input) {
				in.Base = []string{"RANK=9", "PATH=/bin", "OMP_NUM_THREADS=8", "NCCL_SOCKET_IFNAME=ib0", "NCCL_COMM_ID=1.2.3.4:5", "TORCH_NCCL_ASYNC_ERROR_HANDLING=0"}
				in.LocalRank = 1
				in.NCCLVars = [][2]string{{"NCCL_SOCKET_IFNAME", "=eth0"}, {"NCCL_IB_HCA", "=mlx5_0:1"}}
			},
			want: map[string]string{
				"RANK": "1", "PATH": "/bin", "OMP_NUM_THREADS": "8", "NCCL_SOCKET_IFNAME": "ib0",
				"NCCL_IB_HCA": "=mlx5_0:1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
			},
			absent: []string{"NCCL_COMM_ID", "NCCL_IB_GID_INDEX"},
		},
		{
			name: "the job's credential replaces the agent's cluster token",
			edit: func(in *Input) {
				in.Base = []string{"MUSTER_TOKEN=cluster-secret-0123456789", "MUSTER_TOKEN_FILE=/etc/muster/token", "MUSTER_JOB_TOKEN=stale"}
				in.JobToken, in.StoreCA = "j-1.secret", "/etc/muster/ca.pem"
			},
			want:   map[string]string{"MUSTER_JOB_TOKEN": "j-1.secret", "MUSTER_TLS_CA": "/etc/muster/ca.pem"},
			absent: []string{"MUSTER_TOKEN", "MUSTER_TOKEN_FILE"},
		},
		{
			name: "a large job's addresses go in a file on the node that has them",
			edit: func(in *Input) {
				in.NodeAddrs = manyAddrs(10_000)
				in.NodeAddrsFile = "/tmp/j-1/node_addrs"
			},
			want:   map[string]string{"MUSTER_NODE_ADDRS_FILE": "/tmp/j-1/node_addrs", "MUSTER_NNODES": "10000", "WORLD_SIZE": "20000"},
			absent: []string{"MUSTER_NODE_ADDRS"},
		},
		{
			name: "a node without the roster knows the sizes; an outer job's roster is dropped",
			edit: func(in *Input) {
				in.Base = []string{"MUSTER_NODE_ADDRS=1.1.1.1", "MUSTER_NODE_ADDRS_FILE=/x", "MUSTER_HOSTFILE=/y"}
				in.NodeRank, in.NNodes, in.NodeAddrs, in.Hostfile = 4321, 10_000, nil, ""
			},
			want:   map[string]string{"MUSTER_NNODES": "10000", "GROUP_WORLD_SIZE": "10000", "WORLD_SIZE": "20000", "GROUP_RANK": "4321"},
			absent: []string{"MUSTER_NODE_ADDRS", "MUSTER_NODE_ADDRS_FILE", "MUSTER_HOSTFILE"},
		},
		{
			name: "an MPI worker gets PMI_FD and its ranks as Hydra sets them",
			edit: func(in *Input) { in.MPI, in.NodeRank, in.LocalRank = true, 1, 1 },
			want: map[string]string{"PMI_FD": "3", "PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1"},
		},
		{
			name: "an Open MPI job's worker gets its node and round, and no Open MPI rank variables",
			edit: func(in *Input) {
				in.OpenMPI, in.NodeName, in.RoundID = true, "b", "r-1"
				in.Base = []string{"OMPI_COMM_WORLD_RANK=3"}
			},
			want:   map[string]string{"MUSTER_NODE_NAME": "b", "MUSTER_ROUND_ID": "r-1"},
			absent: []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", "PMI_FD"},
		},
		{
			name: "an outer mpiexec's PMI variables are dropped",
			edit: func(in *Input) {
				in.Base = []string{"PMI_FD=7", "PMI_RANK=5", "PMI_SIZE=9", "PMI_PORT=h:1", "PMI_ID=5", "HYDI_CONTROL_FD=8", "MPI_LOCALRANKID=2"}
			},
			absent: []string{"PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_ID", "HYDI_CONTROL_FD", "MPI_LOCALRANKID"},
		},
		{
			name: "the user's -x variables win over everything",
			edit: func(in *Input) {
				in.User = []string{"RANK=42", "CUDA_VISIBLE_DEVICES=1", "NCCL_SOCKET_IFNAME==ib0", "FOO=a=b"}
				in.NCCLVars = [][2]string{{"NCCL_SOCKET_IFNAME", "=eth0"}}
			},
			want: map[string]string{"RANK": "42", "CUDA_VISIBLE_DEVICES": "1", "NCCL_SOCKET_IFNAME": "=ib0", "FOO": "a=b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := twoNodes()
			tt.edit(&in)
			env := Build(in)
			for k, want := range tt.want {
				if got, ok := Lookup(env, k); !ok || got != want {
					t.Errorf("%s = %q (set %v), want %q", k, got, ok, want)
				}
			}
			for _, k := range tt.absent {
				if v, ok := Lookup(env, k); ok {
					t.Errorf("%s = %q, want unset", k, v)
				}
			}
			seen := map[string]bool{}
			for i, kv := range env {
				k, _, _ := strings.Cut(kv, "=")
				if seen[k] {
					t.Errorf("%s appears twice", k)
				}
				seen[k] = true
				if i > 0 && env[i-1] > kv {
					t.Errorf("not sorted at %q", kv)
				}
			}
		})
	}
}

func manyAddrs(n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	return addrs
}

// No variable comes near the kernel's 128 KiB limit on one string, whatever
// the number of nodes.
func TestBuildValuesStaySmall(t *testing.T) {
	for _, n := range []int{1, 100, 1000, 10_000} {
		in := twoNodes()
		in.NodeAddrs = manyAddrs(n)
		if !NodeAddrsFit(in.NodeAddrs) {
			in.NodeAddrsFile = "/tmp/j-1/node_addrs"
		}
		for _, kv := range Build(in) {
			if len(kv) > MaxValueBytes+64 {
				t.Errorf("%d nodes: %.40s... is %d bytes", n, kv, len(kv))
			}
		}
	}
}

func TestBuildIsPure(t *testing.T) {
	in := twoNodes()
	in.Base = []string{"A=1"}
	a, b := Build(in), Build(in)
	if strings.Join(a, "\n") != strings.Join(b, "\n") || len(in.Base) != 1 {
		t.Fatal("Build is not deterministic or changed its input")
	}
}

func TestTorchDumpPaths(t *testing.T) {
	for _, tc := range []struct {
		env   []string
		pipe  string
		dumps []string
	}{
		{nil, "", []string{"/tmp/nccl_trace_rank_3"}},
		{[]string{"HOME=/home/u"}, "", []string{"/home/u/.cache/torch/comm_lib_trace_rank_3", "/tmp/nccl_trace_rank_3"}},
		{[]string{"HOME=/home/u", "XDG_CACHE_HOME=/c"}, "", []string{"/c/torch/comm_lib_trace_rank_3", "/tmp/nccl_trace_rank_3"}},
		{[]string{"TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/d/p-", "TORCH_FR_DUMP_TEMP_FILE=/l/t-"}, "/d/p-3.pipe", []string{"/l/t-3"}},
		{[]string{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/old-"}, "", []string{"/old-3"}},
		{[]string{"TORCH_FR_DUMP_TEMP_FILE=/new-", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/old-"}, "", []string{"/new-3"}},
	} {
		if got := TorchDumpPipePath(tc.env, 3); got != tc.pipe {
			t.Errorf("%v: pipe %q, want %q", tc.env, got, tc.pipe)
		}
		if got := TorchDumpPaths(tc.env, 3); !slices.Equal(got, tc.dumps) {
			t.Errorf("%v: dumps %q, want %q", tc.env, got, tc.dumps)
		}
	}
}

// A job's own NCCL RAS address is set unless the user set one or turned
// RAS off; RASAddr reads back where a worker's RAS answers.
func TestRASAddr(t *testing.T) {
	for _, tt := range []struct {
		name string
		user []string
		base []string
		want string
	}{
		{"the job's own", nil, nil, "127.0.0.1:4242"},
		{"the user's", []string{"NCCL_RAS_ADDR=10.0.0.1:5000"}, nil, "10.0.0.1:5000"},
		{"RAS off by the user", []string{"NCCL_RAS_ENABLE=0"}, nil, ""},
		{"RAS off in the inherited environment", nil, []string{"NCCL_RAS_ENABLE=0"}, ""},
		{"RAS on, no address", []string{"NCCL_RAS_ENABLE=1"}, nil, "127.0.0.1:4242"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := Build(Input{Base: tt.base, User: tt.user, NProc: 1, NNodes: 1, RASAddr: "127.0.0.1:4242"})
			if got := RASAddr(env); got != tt.want {
				t.Errorf("RASAddr = %q, want %q", got, tt.want)
			}
		})
	}
}
