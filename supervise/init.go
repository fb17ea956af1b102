package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// noInitEnv set to 1 keeps a PID 1 from running as an init: for a container
// runtime that already gives the container one (docker --init, tini).
const noInitEnv = "MUSTER_NO_INIT"

// RunInitIfPID1 makes this process a minimal init when it is PID 1, as a
// container's entrypoint is, and exits with its child's code; otherwise it
// returns at once. PID 1 inherits every orphan of the container and gets no
// signal it has no handler for, so the program runs again as its only child.
func RunInitIfPID1() {
	if os.Getpid() != 1 || os.Getenv(noInitEnv) == "1" {
		return
	}
	os.Exit(runInit())
}

// runInit starts this binary again with the same arguments, environment and
// standard files, forwards signals to it, and reaps every child: one loop is
// the only wait, so an orphan's reaping never takes the child's status.
func runInit() int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM, syscall.SIGPWR)
	pid, err := syscall.ForkExec("/proc/self/exe", os.Args, &syscall.ProcAttr{
		Env: os.Environ(), Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: init (PID 1): cannot start the program as its child: %v\n", os.Args[0], err)
		// As a shell: 127 for a program not found, 126 for one that cannot run.
		if errors.Is(err, syscall.ENOENT) {
			return 127
		}
		return 126
	}
	go func() {
		for s := range sigs {
			syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: init (PID 1): wait: %v\n", os.Args[0], err)
			return 70
		}
		if p != pid {
			continue // an adopted orphan, now gone
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}
