package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/musterhq/muster/envprop"
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
}

// exitStatus is how a worker ended.
type exitStatus struct {
	code   int
	signal int
	err    string // a failure to start or to be reaped
}

func (st exitStatus) failed() bool { return st.code != 0 || st.signal != 0 || st.err != "" }

// programPath finds argv0 as the worker's shell would: a name with a slash
// as it is (relative to the working directory), else in the worker's PATH.
// Not found gives "", which fails to start with ENOENT.
func programPath(argv0 string, env []string) string {
	if strings.Contains(argv0, "/") {
		return argv0
	}
	path, _ := envprop.Lookup(env, "PATH")
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, argv0)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// startError turns a failure to start into the shell's exit code: 127 for a
// missing command, 126 for one that cannot be run.
func startError(argv0 string, err error) exitStatus {
	code := 126
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, os.ErrNotExist) {
		code = 127
	}
	return exitStatus{code: code, err: fmt.Sprintf("cannot start %q: %v", argv0, err)}
}
