package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Bounds on waiting for a worker after it was killed or after it exited.
const (
	// unkillableAfter is how long a worker may outlive SIGKILL (a process in
	// uninterruptible sleep) before the agent reports it and stops waiting.
	unkillableAfter = 10 * time.Second
	// drainAfter bounds reading output after the worker exited, in case a
	// process outside its group still holds the pipes.
	drainAfter = 2 * time.Second
)

// workerSpec is what starts one worker process.
type workerSpec struct {
	argv []string
	env  []string
	dir  string
	// cred, when set, is who the worker runs as (a job submitted by another
	// local user to an agent running as root).
	cred *syscall.Credential
	// stdin, when set, is the worker's stdin (an *os.File, closed here once
	// the worker holds it); /dev/null otherwise.
	stdin  io.Reader
	stdout lineSink
	stderr lineSink
}

// exitStatus is how a worker ended.
type exitStatus struct {
	code   int
	signal int
	err    string // a failure to start or to be reaped
}

// process is one running worker: the leader of its own process group.
type process struct {
	pid      int
	done     chan exitStatus // receives once, when the worker ended and its output is read
	killed   chan struct{}   // closed once SIGKILL was sent
	killOnce sync.Once
}

// startProcess starts a worker in its own process group with Pdeathsig set.
// Pdeathsig fires when the *thread* that forked the child exits, so the
// goroutine holds its OS thread locked for the child's whole life.
func startProcess(ws workerSpec) (*process, error) {
	if len(ws.argv) == 0 {
		return nil, errors.New("no command")
	}
	path, err := lookPath(ws.argv[0], ws.dir, ws.env)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	p := &process{done: make(chan exitStatus, 1), killed: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is never unlocked: it ends with this goroutine, after the child.
		cmd := &exec.Cmd{
			Path:   path,
			Args:   ws.argv,
			Env:    ws.env,
			Dir:    ws.dir,
			Stdin:  ws.stdin,
			Stdout: outW,
			Stderr: errW,
			SysProcAttr: &syscall.SysProcAttr{
				Setpgid:    true,
				Pdeathsig:  syscall.SIGKILL,
				Credential: ws.cred,
			},
		}
		err := cmd.Start()
		outW.Close()
		errW.Close()
		if c, ok := ws.stdin.(io.Closer); ok {
			c.Close()
		}
		if err != nil {
			outR.Close()
			errR.Close()
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil

		read := make(chan struct{}, 2)
		go func() { readLines(outR, ws.stdout); read <- struct{}{} }()
		go func() { readLines(errR, ws.stderr); read <- struct{}{} }()

		werr := cmd.Wait()
		st := statusOf(cmd.ProcessState, werr)
		// Whatever the worker left in its group goes with it: no orphans.
		syscall.Kill(-p.pid, syscall.SIGKILL)
		drain := time.NewTimer(drainAfter)
		for n := 0; n < 2; {
			select {
			case <-read:
				n++
			case <-drain.C:
				// A process outside the group holds the pipes; stop reading.
				outR.Close()
				errR.Close()
			}
		}
		drain.Stop()
		outR.Close()
		errR.Close()
		p.done <- st
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func statusOf(ps *os.ProcessState, err error) exitStatus {
	if ps == nil {
		return exitStatus{code: 1, err: fmt.Sprintf("wait: %v", err)}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		return exitStatus{signal: int(ws.Signal())}
	case ok && ws.Exited():
		return exitStatus{code: ws.ExitStatus()}
	}
	return exitStatus{code: ps.ExitCode()}
}

// signal sends sig to the worker's whole process group.
func (p *process) signal(sig syscall.Signal) {
	syscall.Kill(-p.pid, sig)
	if sig == syscall.SIGKILL {
		p.killOnce.Do(func() { close(p.killed) })
	}
}

// wait returns how the worker ended. Once it was sent SIGKILL it waits at
// most after more: a process in uninterruptible sleep must not hold the job.
func (p *process) wait(after time.Duration) exitStatus {
	select {
	case st := <-p.done:
		return st
	case <-p.killed:
	}
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case st := <-p.done:
		return st
	case <-t.C:
		return exitStatus{signal: int(syscall.SIGKILL),
			err: fmt.Sprintf("still running %s after SIGKILL (uninterruptible sleep?); no longer waited for", after)}
	}
}
