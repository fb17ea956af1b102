// Package envprop computes a worker's environment: one pure function from
// the job, its round, the node and the local rank to the variables a worker
// gets, plus detection of NCCL's network variables.
//
// Nothing it sets grows past MaxValueBytes with the number of nodes: the
// nodes' addresses are MUSTER_NODE_ADDRS while they fit, and a file named by
// MUSTER_NODE_ADDRS_FILE past that; a node whose assignment has no roster
// (any but node rank 0 of a job of more than 64 nodes) sets neither, nor
// MUSTER_HOSTFILE.
package envprop

import (
	"github.com/musterhq/muster/jobspec"
	"slices"
	"strconv"
	"strings"
)

// Input is everything a worker's environment depends on.
type Input struct {
	// Base is the environment the worker inherits (NAME=value): the agent's
	// own, or nothing when the job says not to inherit it.
	Base []string
	// User holds the user's -x variables (NAME=value); they win over all else.
	User []string

	JobID     string
	StoreAddr string
	// JobToken is the job's credential for the store's KV and barriers.
	JobToken string
	// StoreCA is the CA file that verifies the store's TLS certificate, if
	// the store uses TLS.
	StoreCA string
	// Hostfile is the path of the job's generated Open MPI hostfile, where
	// this node has one.
	Hostfile string

	NodeRank int
	// NNodes is the number of nodes in the job; 0 means len(NodeAddrs).
	NNodes int
	// NodeAddrs are the nodes' addresses by node rank, where this node has
	// them and they fit in MaxValueBytes; NodeAddrsFile is the file that
	// holds them otherwise (space separated), on the nodes that have them.
	NodeAddrs     []string
	NodeAddrsFile string
	// NProc is the number of workers on each node.
	NProc     int
	LocalRank int

	MasterAddr string
	MasterPort int
	// NCCLCommID is the NCCL bootstrap root, addr:port; global rank 0 gets it.
	NCCLCommID  string
	UniqueIDHex string

	// GPUs is the job's GPU list on this node (device indices).
	GPUs []int
	// IsolateGPUs shows each worker only its own GPUs.
	IsolateGPUs bool

	RestartCount int
	MaxRestarts  int
	// AgentStore says node rank 0's agent serves PyTorch's TCPStore on
	// MasterPort: ranks connect as clients, and none binds the port.
	AgentStore bool

	// NCCLVars is what NCCL network detection (ncclnet) found on this node,
	// name and value; each is set unless the user set it.
	NCCLVars [][2]string

	// MPI says that the worker speaks PMI to its agent on descriptor
	// PMIWorkerFD (--mpi).
	MPI bool
	// OpenMPI says that the worker is an Open MPI job's mpirun or daemon
	// for this node (--mpi openmpi), not a rank: it gets NodeName and
	// RoundID, and no Open MPI rank variables, which its ranks would inherit.
	OpenMPI  bool
	NodeName string
	RoundID  string

	// ErrorDir, when set, holds each rank's TORCHELASTIC_ERROR_FILE
	// (ErrorFilePath), where PyTorch's @record writes a failed rank's
	// exception: the job's private directory on the node.
	ErrorDir string

	// RASAddr, when set, is the job's own NCCL RAS address on this node
	// (host:port), so that two jobs' RAS services never answer for each
	// other; set unless the user set NCCL_RAS_ADDR or NCCL_RAS_ENABLE.
	RASAddr string

	// Hang, when set, is the job's --hang-timeout: where each rank's
	// heartbeat file is, and where PyTorch's flight recorder goes.
	Hang *Hang

	// UCXDevice, when set, is the RDMA NIC nearest the worker's GPU as UCX
	// names it (mlx5_0:1): an MPI worker's UCX_NET_DEVICES unless set.
	UCXDevice string
}

// Hang is what a job with a hang timeout gives its workers.
type Hang struct {
	// Dir holds each rank's heartbeat file and PyTorch's dump pipes: the
	// job's private directory on the node.
	Dir string
	// TraceDir, when set, is where PyTorch dumps each rank's NCCL flight
	// recorder (the job's --log-dir); PyTorch's default otherwise.
	TraceDir string
}

// ErrorFilePath is rank's error file in dir, for PyTorch's @record.
func ErrorFilePath(dir string, rank int) string {
	return dir + "/error-" + strconv.Itoa(rank) + ".json"
}

// RASAddr is where a worker's NCCL answers RAS clients by env: its
// NCCL_RAS_ADDR, or "" when that is unset (NCCL's default port may be
// another job's) or NCCL_RAS_ENABLE turns the service off.
func RASAddr(env []string) string {
	if v, ok := Lookup(env, NCCLRASEnable); ok && strings.TrimSpace(v) == "0" {
		return ""
	}
	v, _ := Lookup(env, NCCLRASAddr)
	return v
}

// rasOff says the user turned NCCL's RAS service off.
func rasOff(env map[string]string, user []string) bool {
	v, ok := Lookup(user, NCCLRASEnable)
	if !ok {
		if kv, set := env[NCCLRASEnable]; set {
			v, ok = strings.TrimPrefix(kv, NCCLRASEnable+"="), true
		}
	}
	return ok && strings.TrimSpace(v) == "0"
}

// HeartbeatPath is rank's heartbeat file in dir.
func HeartbeatPath(dir string, rank int) string { return dir + "/heartbeat-" + strconv.Itoa(rank) }

// TorchOldDumpFile is where PyTorch up to 2.6 dumps a flight recorder when
// nothing says otherwise; the rank follows. Later ones dump under the
// user's cache directory (TorchDumpPaths).
const TorchOldDumpFile = "/tmp/nccl_trace_rank_"

// TorchDumpPipePath is the pipe PyTorch makes for a rank, to dump its
// flight recorder when something is written to it: the variable's value,
// the rank and ".pipe"; "" when the variable is unset in env.
func TorchDumpPipePath(env []string, rank int) string {
	stem, _ := Lookup(env, TorchDumpPipe)
	if stem == "" {
		return ""
	}
	return stem + strconv.Itoa(rank) + ".pipe"
}

// TorchDumpPaths are where PyTorch may dump a rank's flight recorder in
// env: the file its variables name, or, without them, its defaults: under
// $XDG_CACHE_HOME or ~/.cache (newer PyTorch), or in /tmp (older).
func TorchDumpPaths(env []string, rank int) []string {
	r := strconv.Itoa(rank)
	for _, name := range []string{TorchDumpFile, TorchDumpFileOld} {
		if prefix, _ := Lookup(env, name); prefix != "" {
			return []string{prefix + r}
		}
	}
	var paths []string
	if cache, _ := Lookup(env, "XDG_CACHE_HOME"); cache != "" {
		paths = append(paths, cache+"/torch/comm_lib_trace_rank_"+r)
	} else if home, _ := Lookup(env, "HOME"); home != "" {
		paths = append(paths, home+"/.cache/torch/comm_lib_trace_rank_"+r)
	}
	return append(paths, TorchOldDumpFile+r)
}

// PMIWorkerFD is an MPI worker's end of its PMI socketpair: the descriptor
// after stdin, stdout and stderr, where the agent's shim puts it.
const PMIWorkerFD = 3

// outerPMI are variables an outer mpiexec (Hydra) gives its processes: they
// name its connections, never this job's.
var outerPMI = []string{PMIFD, PMIRank, PMISize, "PMI_PORT", "PMI_ID", "HYDI_CONTROL_FD", MPILocalNRanks, MPILocalRankID}

// MaxValueBytes bounds the variables whose size grows with the job
// (MUSTER_NODE_ADDRS): the kernel refuses a single string over 128 KiB in
// exec, and the whole environment shares the argument space. Past it the
// value goes in a file and MUSTER_NODE_ADDRS_FILE names it.
const MaxValueBytes = 4096

// Variables that hold or point to the job's roster.

// JoinNodeAddrs is MUSTER_NODE_ADDRS's value, and the contents of
// MUSTER_NODE_ADDRS_FILE: the addresses space separated.
func JoinNodeAddrs(addrs []string) string { return strings.Join(addrs, " ") }

// NodeAddrsFit says whether addrs fit in MUSTER_NODE_ADDRS itself.
func NodeAddrsFit(addrs []string) bool {
	n := max(len(addrs)-1, 0)
	for _, a := range addrs {
		n += len(a)
	}
	return n <= MaxValueBytes
}

// Nodes is the number of nodes in the job.
func (in Input) Nodes() int {
	if in.NNodes > 0 {
		return in.NNodes
	}
	return len(in.NodeAddrs)
}

// Rank is the worker's global rank: node-major, as torchrun numbers them.
func (in Input) Rank() int { return jobspec.GlobalRank(in.NodeRank, in.NProc, in.LocalRank) }

// WorldSize is the number of workers in the job.
func (in Input) WorldSize() int { return in.Nodes() * in.NProc }

// LocalGPUs is the worker's own share of the node's GPU list: entries
// LocalRank*G/P to (LocalRank+1)*G/P-1.
func (in Input) LocalGPUs() []int {
	if len(in.GPUs) == 0 || in.NProc == 0 {
		return nil
	}
	per := len(in.GPUs) / in.NProc
	return in.GPUs[in.LocalRank*per : (in.LocalRank+1)*per]
}

// Build returns the worker's environment, sorted, as NAME=value strings.
//
// Precedence, highest first: the user's -x variables; the variables that
// identify the worker (ranks, sizes, addresses), which replace inherited
// ones since stale values from an outer launcher would be wrong; inherited
// variables; defaults and detected NCCL settings, which fill only gaps.
func Build(in Input) []string {
	// env maps each name to its whole NAME=value entry: an inherited one is
	// kept as it is, not cut and joined again for each worker.
	env := inherited(in)
	for k, v := range identity(in) {
		env[k] = k + "=" + v
	}
	for k, v := range defaults(in, env) {
		if _, ok := env[k]; !ok {
			env[k] = k + "=" + v
		}
	}
	addByName(env, in.User)
	out := make([]string, 0, len(env))
	for _, kv := range env {
		out = append(out, kv)
	}
	slices.Sort(out)
	return out
}

// inherited is the environment the worker inherits, by name, less what
// would mislead it: another job's or launcher's identity and roster, and
// the agent's own secrets.
func inherited(in Input) map[string]string {
	env := make(map[string]string, len(in.Base)+48)
	addByName(env, in.Base)
	// An inherited NCCL_COMM_ID would make every rank try to be the root.
	delete(env, NCCLCommID)
	// The agent's cluster token is not the workers': they get their job's.
	delete(env, ClusterToken)
	delete(env, TokenFile)
	// An outer job's roster is not this one's, whichever of them this node has.
	delete(env, NodeAddrs)
	delete(env, NodeAddrsFileVar)
	delete(env, Hostfile)
	for _, k := range outerPMI {
		delete(env, k)
	}
	if in.OpenMPI {
		// mpirun sets Open MPI's own, which an outer launcher's must not
		// contradict.
		for _, k := range ompiIdentity {
			delete(env, k)
		}
	}
	return env
}

// ompiIdentity are Open MPI's variables that identify a process, which
// mpirun sets itself under --mpi openmpi.
var ompiIdentity = []string{OMPIRank, OMPISize, OMPILocalRank, OMPILocalSize, OMPINodeRank}

// identity are the variables that identify the worker in its job: its
// ranks, the sizes, the job's addresses and credentials, its GPUs.
func identity(in Input) map[string]string {
	rank, world := in.Rank(), in.WorldSize()
	itoa := strconv.Itoa
	set := map[string]string{
		Rank:                     itoa(rank),
		LocalRank:                itoa(in.LocalRank),
		WorldSize:                itoa(world),
		LocalWorldSize:           itoa(in.NProc),
		GroupRank:                itoa(in.NodeRank),
		GroupWorldSize:           itoa(in.Nodes()),
		RoleRank:                 itoa(rank),
		RoleWorldSize:            itoa(world),
		RoleName:                 "default",
		MasterAddr:               in.MasterAddr,
		MasterPort:               itoa(in.MasterPort),
		TorchelasticRunID:        in.JobID,
		TorchelasticRestartCount: itoa(in.RestartCount),
		TorchelasticMaxRestarts:  itoa(in.MaxRestarts),
		TorchelasticAgentStore:   pythonBool(in.AgentStore),

		JobID:        in.JobID,
		NodeRank:     itoa(in.NodeRank),
		NNodes:       itoa(in.Nodes()),
		MusterMaster: in.MasterAddr,
		GPUsPerNode:  itoa(len(in.GPUs)),
		NCCLUniqueID: in.UniqueIDHex,
		StoreAddr:    in.StoreAddr,
		JobToken:     in.JobToken,
		LocalGPUs:    joinInts(in.LocalGPUs()),
	}
	if in.OpenMPI {
		set[NodeName] = in.NodeName
		set[RoundID] = in.RoundID
	} else {
		set[OMPIRank], set[OMPISize] = itoa(rank), itoa(world)
		set[OMPILocalRank], set[OMPILocalSize] = itoa(in.LocalRank), itoa(in.NProc)
		set[OMPINodeRank] = itoa(in.NodeRank)
	}
	if len(in.NodeAddrs) > 0 && NodeAddrsFit(in.NodeAddrs) {
		set[NodeAddrs] = JoinNodeAddrs(in.NodeAddrs)
	}
	if in.NodeAddrsFile != "" {
		set[NodeAddrsFileVar] = in.NodeAddrsFile
	}
	if in.Hostfile != "" {
		set[Hostfile] = in.Hostfile
	}
	if in.MPI {
		set[PMIFD] = itoa(PMIWorkerFD)
		set[PMIRank] = itoa(rank)
		set[PMISize] = itoa(world)
		set[MPILocalNRanks] = itoa(in.NProc)
		set[MPILocalRankID] = itoa(in.LocalRank)
	}
	if rank == 0 && in.NCCLCommID != "" {
		set[NCCLCommID] = in.NCCLCommID
	}
	if len(in.GPUs) > 0 {
		visible := in.GPUs
		if in.IsolateGPUs {
			visible = in.LocalGPUs()
		}
		set[CUDAVisibleDevices] = joinInts(visible)
	} else {
		// No GPUs asked for: hide them rather than let every worker share GPU 0.
		set[CUDAVisibleDevices] = ""
		delete(set, LocalGPUs)
	}
	if h := in.Hang; h != nil {
		set[HeartbeatFile] = HeartbeatPath(h.Dir, rank)
	}
	return set
}

// defaults are the variables that fill gaps only: PyTorch's, CUDA's and
// NCCL's settings, detected or usual for a job like this one. env is what
// the worker has without them, for the defaults that depend on it.
func defaults(in Input, env map[string]string) map[string]string {
	defaults := map[string]string{TorchNCCLAsyncErrors: "1"}
	if in.StoreCA != "" {
		defaults[TLSCA] = in.StoreCA
	}
	if len(in.GPUs) > 0 {
		// Device indices are NVML's, in PCI bus order; make CUDA count the same way.
		defaults[CUDADeviceOrder] = "PCI_BUS_ID"
	}
	// torchrun's rule, also with --cpu-bind: a thread count following the bound cores cost
	// a data-loading run 9 % (bench/RESULTS.md), and one worker's OpenMP counts its own mask.
	if in.NProc > 1 {
		defaults["OMP_NUM_THREADS"] = "1"
	}
	if in.UCXDevice != "" && in.MPI {
		defaults["UCX_NET_DEVICES"] = in.UCXDevice
	}
	for _, kv := range in.NCCLVars {
		if kv[1] != "" {
			defaults[kv[0]] = kv[1]
		}
	}
	if in.ErrorDir != "" {
		defaults[TorchelasticErrorFile] = ErrorFilePath(in.ErrorDir, in.Rank())
	}
	if in.RASAddr != "" && !isSet(env, in.User, NCCLRASAddr) && !rasOff(env, in.User) {
		defaults[NCCLRASAddr] = in.RASAddr
	}
	if h := in.Hang; h != nil {
		defaults[PythonFaultHandler] = "1"
		defaults[TorchDumpOnTimeout] = "1"
		defaults[TorchDumpPipe] = h.Dir + "/nccl-dump-rank-"
		// Stacks in the flight recorder need the GIL and symbolizing: seconds,
		// or a deadlock; the fault handler prints the Python stacks instead.
		defaults[TorchDumpStacks] = "0"
		if !isSet(env, in.User, TorchFRBufferSize) {
			defaults[TorchTraceBufferSize] = "2000"
		}
		// Older PyTorch reads the second name only, newer ones the first.
		if h.TraceDir != "" && !isSet(env, in.User, TorchDumpFile) && !isSet(env, in.User, TorchDumpFileOld) {
			defaults[TorchDumpFile] = h.TraceDir + "/nccl-trace-rank-"
			defaults[TorchDumpFileOld] = defaults[TorchDumpFile]
		}
	}
	return defaults
}

// addByName adds each NAME=value entry of kvs to env, by name, over what
// env had.
func addByName(env map[string]string, kvs []string) {
	for _, kv := range kvs {
		if k, _, ok := strings.Cut(kv, "="); ok {
			env[k] = kv
		}
	}
}

// isSet says whether name is in the inherited environment or the user's.
func isSet(env map[string]string, user []string, name string) bool {
	if _, ok := env[name]; ok {
		return true
	}
	_, ok := Lookup(user, name)
	return ok
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// Lookup returns NAME's value in an environment list.
func Lookup(env []string, name string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// pythonBool is b as Python's str(bool) writes it, which is what torch
// compares TORCHELASTIC_USE_AGENT_STORE with.
func pythonBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
