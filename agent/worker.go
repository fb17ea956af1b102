package agent

import (
	"os"
	"syscall"
	"time"

	"github.com/musterhq/muster/failure"
)

// unkillableAfter is how long a process may outlive SIGKILL (uninterruptible
// sleep) before the agent reports it and stops waiting.
const unkillableAfter = 10 * time.Second

// workerSpec is what starts one worker process.
type workerSpec struct {
	argv []string
	env  []string
	dir  string
	// cred, when set, is who the worker runs as (a job submitted by another
	// local user to an agent running as root).
	cred *syscall.Credential
	// stdin, when set, is the worker's stdin (the start closes it here);
	// /dev/null otherwise.
	stdin *os.File
}

// exitStatus is how a worker ended.
type exitStatus struct {
	code   int
	signal int
	err    string // a failure to start or to be reaped
	// aborted: the rank called MPI_Abort (code is the code it gave).
	aborted bool
	// facts are what the kernel and the GPUs said of its end.
	facts *failure.Facts
}

// failed says whether the worker did not end well, stopped or not; whether
// that fails the job is failure.Failed's to say.
func (st exitStatus) failed() bool { return st.code != 0 || st.signal != 0 || st.err != "" }
