package jobspec

import (
	"sort"
	"syscall"
)

// forwardable are the signals a launcher, or agent run, may pass on to a
// job's workers (--forward-signals), by name without its SIG. SIGKILL and
// SIGSTOP cannot be handled; SIGTSTP and SIGCONT are the launcher's own
// (Ctrl-Z suspends the launcher, not the job); the Go runtime sends itself
// SIGURG.
var forwardable = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2, "ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM,
	"WINCH": syscall.SIGWINCH, "PWR": syscall.SIGPWR,
}

// DefaultForwardSignals are what --forward-signals forwards unless told
// otherwise: what Slurm's --signal and checkpoint-before-preemption use.
const DefaultForwardSignals = "USR1,USR2"

// ForwardableSignal returns the signal of a name (USR1 or SIGUSR1) that may
// be forwarded to workers.
func ForwardableSignal(name string) (syscall.Signal, bool) {
	if len(name) > 3 && name[:3] == "SIG" {
		name = name[3:]
	}
	s, ok := forwardable[name]
	return s, ok
}

// MayForward says whether a signal number may be sent to a job's workers.
func MayForward(sig int32) bool {
	for _, s := range forwardable {
		if int32(s) == sig {
			return true
		}
	}
	return false
}

// ForwardableNames lists the names --forward-signals takes, sorted.
func ForwardableNames() []string {
	names := make([]string, 0, len(forwardable))
	for n := range forwardable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
