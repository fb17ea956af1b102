package supervise

import (
	"syscall"
	"time"
)

// The shim and its Group talk over one socketpair, in gob: the Group sends a
// shimSpec, then commands; the shim sends events, ending with eventDone.

// shimEnv marks a process started as a shim; its value is unused.
const shimEnv = "MUSTER_SUPERVISE_SHIM"

// Inherited descriptors of a shim: the control socket, then each worker's
// stdin, stdout and stderr, and its PMI socket when it has one (an MPI
// worker: four descriptors, else three), in the order of shimSpec.Workers;
// then the job directory's lock, held until the shim exits.
const (
	controlFD     = 3
	firstWorkerFD = 4
)

type shimSpec struct {
	// Grace is the time between SIGTERM and SIGKILL for what a worker leaves.
	Grace time.Duration
	// Unkillable bounds the wait for processes that outlive SIGKILL.
	Unkillable time.Duration
	// JobDir, when set, is removed once every descendant has ended.
	JobDir  string
	Workers []shimWorker
}

type shimWorker struct {
	Path string
	Argv []string
	Env  []string
	Dir  string
	Cred *syscall.Credential
	// Stdin is false when the worker reads /dev/null.
	Stdin bool
	// PMI says that a fourth descriptor follows its three: its fd 3.
	PMI bool
}

// fds is how many inherited descriptors the worker has.
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
	// Note says what went wrong in cleanup (processes that outlived SIGKILL).
	Note string
}

type shimCommand struct {
	// Index is a worker, or -1 for all of them and every descendant.
	Index  int
	Signal syscall.Signal
}
