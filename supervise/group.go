// Package supervise runs one job's workers on a node and guarantees that no
// descendant outlives the job: each job gets a shim, a small process that is
// the workers' parent and the subreaper of all they start, and that stops
// what is left when the job ends or when its agent dies. It also reads the
// workers' output in whole lines with flow control.
package supervise

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Worker is one process of a job.
type Worker struct {
	// Path is the resolved program; Argv[0] is what it sees as its name.
	Path string
	Argv []string
	Env  []string
	Dir  string
	// Cred, when set, is who the worker runs as.
	Cred *syscall.Credential
	// Stdin, Stdout and Stderr are given to the worker; nil is /dev/null.
	// Start closes them: the worker holds the only copies.
	Stdin, Stdout, Stderr *os.File
	// PMI, when set, is the worker's end of its PMI socketpair, its fd 3
	// (PMI_FD=3); Start closes it too. Only MPI workers have one.
	PMI *os.File
	// Cgroup, when set, is the cgroup directory the worker starts in, and
	// every process it starts with it.
	Cgroup string
	// CPUs, when set, are the only CPUs the worker may run on, and Memory
	// the NUMA nodes its memory is preferred on; the shim sets both before
	// the worker's exec (Event.CPUErr, MemErr say what it could not).
	CPUs, Memory []int
}

// Spec is one job's workers on this node.
type Spec struct {
	Workers []Worker
	// Grace is the time between SIGTERM and SIGKILL for what a worker leaves
	// behind and for what is left when the agent goes away.
	Grace time.Duration
	// Unkillable bounds the wait for a process that outlives SIGKILL.
	Unkillable time.Duration
	// JobDir, when set, is removed by the shim once every descendant has
	// ended if the agent died first; a live agent removes it itself, once
	// it has read what the workers left there.
	JobDir string
	// Lock, when set, is held by the shim until it exits: the job directory's
	// lock, which tells a later agent that the directory is still in use.
	Lock *os.File
	// Spare, when set, is the shim that runs these workers; Start takes it.
	Spare *Spare
	// CgroupV1Home, when the workers' cgroups are cgroup v1's, is the
	// shim's own: it enters each worker's cgroup to fork it, then goes back.
	CgroupV1Home string
	// JobCgroup, when set, is the workers' cgroups' parent: if the agent
	// dies first, the shim removes it and them once every descendant has
	// ended (a live agent reads them first, and removes them itself).
	JobCgroup string
}

// EventKind is what happened to a worker.
type EventKind int

const (
	Started EventKind = iota + 1
	StartFailed
	Exited
)

// Event is one worker's start or end.
type Event struct {
	Kind  EventKind
	Index int
	Pid   int
	// Code and Signal say how it exited; Signal is 0 unless a signal ended it.
	Code, Signal int
	// Err is why it did not start.
	Err error
	// CPUErr and MemErr, on Started, say why the worker's CPUs or memory
	// were not bound as Worker.CPUs and Worker.Memory asked: nil when they
	// were; for memory, syscall.EEXIST when the agent runs under a memory
	// policy of its own, which the worker keeps.
	CPUErr, MemErr error
}

// Group is a running job's workers, through their shim: Start, Events as
// they start and end, Signal, Stop with a grace, Wait. The lifecycle of a
// task as nomad's executor has it.
type Group struct {
	cmd      *exec.Cmd
	conn     *os.File
	mu       sync.Mutex
	stopping bool
	killAt   time.Time     // when a stop under way sends SIGKILL
	sooner   chan struct{} // tells that stop's timer that killAt moved earlier
	enc      *gob.Encoder
	events   chan Event
	done     chan struct{}
	note     string
}

// Spare is a shim started before its job is known, so that the job's start
// does not wait for a process to exec and initialise: most of a small job's
// start-up on one machine. One Start takes it; Close ends it unused.
type Spare struct {
	cmd   *exec.Cmd
	conn  *os.File
	close sync.Once
}

// StartSpare starts a shim that waits for its job.
func StartSpare() (*Spare, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervise: socketpair: %w", err)
	}
	// Non-blocking, so that closing it interrupts a read, as the agent's exit would.
	unix.SetNonblock(fds[0], true)
	conn, shimEnd := os.NewFile(uintptr(fds[0]), "shim-control"), os.NewFile(uintptr(fds[1]), "shim-control")
	defer shimEnd.Close()
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{"muster-shim"},
		Env:         []string{shimEnv + "=1"},
		ExtraFiles:  []*os.File{shimEnd},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("supervise: start shim: %w", err)
	}
	return &Spare{cmd: cmd, conn: conn}, nil
}

// Close ends a spare that no Start took, and waits for it; again, it does
// nothing.
func (sp *Spare) Close() {
	sp.close.Do(func() {
		sp.conn.Close()
		sp.cmd.Wait()
	})
}

// Start starts the workers under a shim: spec.Spare, or a new one. Events
// follow on Events.
func Start(spec Spec) (*Group, error) {
	defer closeFiles(spec.Workers)
	spare := spec.Spare
	if spec.Unkillable <= 0 {
		spec.Unkillable = 10 * time.Second
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		if spare != nil {
			spare.Close()
		}
		return nil, err
	}
	defer devnull.Close()
	var fds []int
	ss := shimSpec{Grace: spec.Grace, Unkillable: spec.Unkillable, JobDir: spec.JobDir, CgroupV1Home: spec.CgroupV1Home, JobCgroup: spec.JobCgroup}
	envIndex := map[string]int32{}
	for _, w := range spec.Workers {
		files := []*os.File{w.Stdin, w.Stdout, w.Stderr}
		for i, f := range files {
			if f == nil {
				files[i] = devnull
			}
		}
		if w.PMI != nil {
			files = append(files, w.PMI)
		}
		for _, f := range files {
			fds = append(fds, int(f.Fd()))
		}
		ss.Workers = append(ss.Workers, shimWorker{Path: w.Path, Argv: w.Argv, Env: ss.addEnv(w.Env, envIndex), Dir: w.Dir, Cred: w.Cred, PMI: w.PMI != nil, Cgroup: w.Cgroup,
			CPUs: w.CPUs, Memory: w.Memory})
	}
	if spec.Lock != nil {
		fds = append(fds, int(spec.Lock.Fd()))
	}
	if spare != nil {
		g, err := handOver(spare, ss, fds)
		if err == nil {
			return g, nil
		}
		// The spare died (killed, or out of memory): a new shim may not.
	}
	if spare, err = StartSpare(); err != nil {
		return nil, err
	}
	return handOver(spare, ss, fds)
}

// handOver gives a shim its workers' descriptors and its spec.
func handOver(spare *Spare, ss shimSpec, fds []int) (*Group, error) {
	g := &Group{cmd: spare.cmd, conn: spare.conn, enc: gob.NewEncoder(spare.conn), sooner: make(chan struct{}, 1),
		events: make(chan Event, 2*len(ss.Workers)+1), done: make(chan struct{})}
	err := sendFDs(spare.conn, fds)
	if err == nil {
		err = g.enc.Encode(ss)
	}
	if err != nil {
		spare.cmd.Process.Kill()
		spare.Close()
		return nil, fmt.Errorf("supervise: send spec to shim: %w", err)
	}
	spare.close.Do(func() {}) // the Group owns it now
	go g.read()
	return g, nil
}

// sendFDs passes fds in messages the kernel takes, the last marked so.
func sendFDs(conn *os.File, fds []int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	for {
		n := min(len(fds), fdsPerMessage)
		body := []byte{moreFDs}
		if n == len(fds) {
			body[0] = lastFDs
		}
		var oob []byte
		if n > 0 {
			oob = unix.UnixRights(fds[:n]...)
		}
		var serr error
		if err := rc.Write(func(fd uintptr) bool {
			serr = unix.Sendmsg(int(fd), body, oob, nil, 0)
			return serr != unix.EAGAIN
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		if fds = fds[n:]; len(fds) == 0 {
			return nil
		}
	}
}

func closeFiles(ws []Worker) {
	for _, w := range ws {
		for _, f := range []*os.File{w.Stdin, w.Stdout, w.Stderr, w.PMI} {
			if f != nil {
				f.Close()
			}
		}
	}
}

// read turns the shim's reports into Events, always promptly: the channel
// holds every event a group can have.
func (g *Group) read() {
	dec := gob.NewDecoder(g.conn)
	for {
		var ev shimEvent
		if err := dec.Decode(&ev); err != nil {
			g.note = "the job's supervising process ended unexpectedly: " + err.Error()
			break
		}
		switch ev.Kind {
		case eventStarted:
			g.events <- Event{Kind: Started, Index: ev.Index, Pid: ev.Pid, CPUErr: errnoOrNil(ev.CPUErr), MemErr: errnoOrNil(ev.MemErr)}
		case eventStartFailed:
			g.events <- Event{Kind: StartFailed, Index: ev.Index, Err: ev.Errno}
		case eventExited:
			g.events <- Event{Kind: Exited, Index: ev.Index, Pid: ev.Pid, Code: ev.Code, Signal: ev.Signal}
		}
		if ev.Kind == eventDone {
			g.note = ev.Note
			break
		}
	}
	g.cmd.Wait()
	g.conn.Close()
	close(g.events)
	close(g.done)
}

// errnoOrNil is e as an error, nil for 0: a nil interface, not a zero Errno.
func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Events delivers each worker's start and end; it is closed once every
// descendant of the workers has ended (or was given up on) and the job
// directory is gone.
func (g *Group) Events() <-chan Event { return g.events }

// Done is closed when Events is.
func (g *Group) Done() <-chan struct{} { return g.done }

// Note says what went wrong at the end, if anything did: processes that
// outlived SIGKILL, or a shim that died.
func (g *Group) Note() string {
	<-g.done
	return g.note
}

// Stop ends the job's processes: SIGTERM to every worker's group and every
// descendant, then SIGKILL once grace has passed (at once for a grace of 0).
// Calling it again with a shorter grace kills sooner; a longer one changes
// nothing.
func (g *Group) Stop(grace time.Duration) {
	grace = max(grace, 0)
	at := time.Now().Add(grace)
	g.mu.Lock()
	first := !g.stopping
	sooner := first || at.Before(g.killAt)
	g.stopping = true
	if sooner {
		g.killAt = at
	}
	g.mu.Unlock()
	switch {
	case !sooner:
	case grace == 0:
		g.SignalAll(syscall.SIGKILL)
	case first:
		g.SignalAll(syscall.SIGTERM)
		go g.killAfterGrace()
	default:
		select {
		case g.sooner <- struct{}{}:
		default: // the timer has word already, and reads killAt afresh
		}
	}
}

// killAfterGrace sends SIGKILL at killAt, which a later Stop may bring
// forward, unless every process ended first.
func (g *Group) killAfterGrace() {
	for {
		g.mu.Lock()
		at := g.killAt
		g.mu.Unlock()
		t := time.NewTimer(time.Until(at))
		select {
		case <-g.done:
			t.Stop()
			return
		case <-g.sooner:
			t.Stop()
		case <-t.C:
			g.SignalAll(syscall.SIGKILL)
			return
		}
	}
}

// Wait returns once every process of the job has ended (or was given up
// on), or ctx ends; it returns what went wrong at the end, if anything.
func (g *Group) Wait(ctx context.Context) error {
	select {
	case <-g.done:
		if g.note != "" {
			return errors.New(g.note)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Signal sends sig to worker i's process group.
func (g *Group) Signal(i int, sig syscall.Signal) error {
	return g.send(shimCommand{Index: i, Signal: sig})
}

// SignalLeaders sends sig to each running worker's own process, the one
// Start started, and to nothing it started: a signal a program handles
// (SIGUSR1 to checkpoint) would kill its helpers that do not.
func (g *Group) SignalLeaders(sig syscall.Signal) error {
	return g.send(shimCommand{Index: -1, Signal: sig, Leaders: true})
}

// Abort sends SIGABRT to worker i's process group, with core dumps turned
// off first: a Python worker with PYTHONFAULTHANDLER prints every thread's
// stack on it, and a hung worker's dump is its stacks, not its memory.
func (g *Group) Abort(i int) error {
	return g.send(shimCommand{Index: i, Signal: syscall.SIGABRT, NoCore: true})
}

// SignalAll sends sig to every worker's process group and every descendant;
// SIGKILL also means that what workers leave behind is killed at once.
func (g *Group) SignalAll(sig syscall.Signal) error {
	return g.send(shimCommand{Index: -1, Signal: sig})
}

func (g *Group) send(c shimCommand) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.done:
		return errors.New("supervise: the job's processes have ended")
	default:
	}
	return g.enc.Encode(c)
}
