package supervise

import (
	"syscall"
	"time"
)

// The shim and its Group talk over one socketpair: the Group first passes
// the workers' descriptors (fdMessages), then sends a shimSpec and commands
// in gob; the shim sends events, ending with eventDone. Descriptors are
// passed rather than inherited so that a shim can be started before its job
// is known (Spare).

// shimEnv marks a process started as a shim; its value is unused.
const shimEnv = "MUSTER_SUPERVISE_SHIM"

// controlFD is the shim's one inherited descriptor, the control socket.
const controlFD = 3

// The workers' descriptors go in messages of at most fdsPerMessage
// (the kernel takes 253), each with a one-byte body: moreFDs, or lastFDs
// on the last. In order: each worker's stdin, stdout and stderr, and its PMI
// socket when it has one (an MPI worker: four descriptors, else three), in
// the order of shimSpec.Workers; then the job directory's lock, if any, held
// until the shim exits.
const (
	fdsPerMessage = 250
	moreFDs       = 1
	lastFDs       = 0
)

type shimSpec struct {
	// Grace is the time between SIGTERM and SIGKILL for what a worker leaves.
	Grace time.Duration
	// Unkillable bounds the wait for processes that outlive SIGKILL.
	Unkillable time.Duration
	// JobDir, when set, is removed once every descendant has ended, by the
	// shim when the agent is gone.
	JobDir  string
	Workers []shimWorker
	// Env holds each distinct environment entry of the workers once: their
	// environments share most entries, which are then sent once, not once
	// a worker.
	Env []string
	// CgroupV1Home, with cgroups on v1, is the cgroup the shim goes back to
	// after forking a worker into its own; "" on v2, where a fork goes
	// straight into the worker's cgroup.
	CgroupV1Home string
	// JobCgroup, when set, is removed with the cgroups in it once every
	// descendant has ended, if the agent went away first.
	JobCgroup string
}

type shimWorker struct {
	Path string
	Argv []string
	// Env is the worker's environment, as indices into shimSpec.Env.
	Env  []int32
	Dir  string
	Cred *syscall.Credential
	// Stdin is false when the worker reads /dev/null.
	Stdin bool
	// PMI says that a fourth descriptor follows its three: its fd 3.
	PMI bool
	// Cgroup, when set, is the cgroup directory the worker starts in.
	Cgroup string
	// CPUs and Memory bind it: the CPUs it runs on, the NUMA nodes its
	// memory prefers; empty: left alone.
	CPUs, Memory []int
}

// addEnv adds env as the environment of the worker next added, its entries
// to ss.Env where they are not yet; index maps an entry to its place there.
func (ss *shimSpec) addEnv(env []string, index map[string]int32) []int32 {
	ids := make([]int32, len(env))
	for i, kv := range env {
		id, ok := index[kv]
		if !ok {
			id = int32(len(ss.Env))
			index[kv] = id
			ss.Env = append(ss.Env, kv)
		}
		ids[i] = id
	}
	return ids
}

// env is a worker's environment.
func (ss *shimSpec) env(w shimWorker) []string {
	env := make([]string, len(w.Env))
	for i, id := range w.Env {
		env[i] = ss.Env[id]
	}
	return env
}

// fds is how many passed descriptors the worker has.
func (w shimWorker) fds() int {
	if w.PMI {
		return 4
	}
	return 3
}

type eventKind int

const (
	eventStarted eventKind = iota + 1
	eventStartFailed
	eventExited
	eventDone
)

type shimEvent struct {
	Kind   eventKind
	Index  int
	Pid    int
	Code   int
	Signal int
	// Errno is why a start failed.
	Errno syscall.Errno
	// CPUErr and MemErr, on a start, say why its CPUs or memory were not
	// bound as asked (see threadBinding.bind); 0 when they were.
	CPUErr, MemErr syscall.Errno
	// Note says what went wrong in cleanup (processes that outlived SIGKILL).
	Note string
}

type shimCommand struct {
	// Index is a worker, or -1 for all of them and every descendant.
	Index  int
	Signal syscall.Signal
	// Leaders sends Signal to each running worker's own process only, not
	// to its process group nor its descendants.
	Leaders bool
	// NoCore turns core dumps off for every process of the worker's group
	// before Signal reaches them: a dump of a large process would hold up
	// the job's stop for as long as it takes to write.
	NoCore bool
}
