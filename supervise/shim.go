package supervise

import (
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A process started as a shim (StartSpare starts the binary that
// supervises workers again) runs as one from this package's initialisation
// and exits. Go initialises a package once its imports are, before the
// packages that only the rest of the binary needs (gRPC, Prometheus, the
// command line's): the launcher's shim starts in 3.5 ms instead of 5.7.
func init() {
	if _, ok := os.LookupEnv(shimEnv); ok {
		os.Exit(runShim())
	}
}

// A shim is the parent of one job's workers on a node and the subreaper of
// everything they start, so it sees every descendant, whatever session it
// moved to. It outlives its agent: when the control socket closes (the agent
// or launcher died, even by SIGKILL), it stops what is left, SIGTERM then
// SIGKILL after the grace, and removes the job directory.
type shim struct {
	spec    shimSpec
	fds     []int // the workers' descriptors, in the order of spec.Workers
	enc     *gob.Encoder
	leaders map[int]int // pid -> worker index, while running
	groups  []int       // process group of each started worker
	notes   []string
	home    int // v1: the shim's own cgroup's tasks file, once opened; -1 before
	binding threadBinding

	cleaning, killing bool
	agentGone         bool // the control socket closed
	graceUp           <-chan time.Time
	giveUp            <-chan time.Time
	repeat            *time.Ticker
}

type reaped struct {
	pid int
	ws  syscall.WaitStatus
}

func runShim() int {
	// Workers get Pdeathsig, which follows the thread that forked them.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 70
	}
	// Signals sent to the shim itself stop the job as a closed socket does.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// A closed socket must not kill the shim; Notify, not Ignore, since an
	// ignored SIGPIPE would be inherited by the workers.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	syscall.CloseOnExec(controlFD)
	fds, err := receiveFDs(controlFD)
	if err != nil {
		return 71 // a spare whose agent went away, or a broken agent
	}
	ctl := os.NewFile(controlFD, "control")
	dec := gob.NewDecoder(ctl)
	s := &shim{enc: gob.NewEncoder(ctl), leaders: map[int]int{}, home: -1}
	if err := dec.Decode(&s.spec); err != nil {
		return 71
	}
	n := 0
	for _, w := range s.spec.Workers {
		n += w.fds()
	}
	if len(fds) < n {
		return 71
	}
	s.fds = fds[:n] // what follows is the lock, kept open until exit
	s.start()
	cmds := make(chan shimCommand)
	go func() {
		defer close(cmds)
		for {
			var c shimCommand
			if dec.Decode(&c) != nil {
				return
			}
			cmds <- c
		}
	}()
	reaps := make(chan reaped)
	go reap(reaps)
	if len(s.leaders) == 0 {
		s.cleanup()
	}
	for {
		var repeat <-chan time.Time
		if s.repeat != nil {
			repeat = s.repeat.C
		}
		select {
		case c, ok := <-cmds:
			if !ok {
				cmds = nil
				s.agentGone = true
				s.cleanup()
				continue
			}
			s.command(c)
		case <-sigs:
			s.cleanup()
		case r, ok := <-reaps:
			if !ok {
				return s.finish()
			}
			s.reaped(r)
		case <-s.graceUp:
			s.graceUp = nil
			s.killAll()
		case <-repeat:
			s.signalDescendants(syscall.SIGKILL)
		case <-s.giveUp:
			var left []int
			for _, p := range descendants(os.Getpid()) {
				left = append(left, p.pid)
			}
			s.notes = append(s.notes, fmt.Sprintf("processes %v still alive %s after SIGKILL (uninterruptible sleep?); no longer waited for",
				left, s.spec.Unkillable))
			return s.finish()
		}
	}
}

// start forks every worker into its own process group, then closes the
// shim's copies of their pipes so that their readers see the end. The
// starts are reported together once every worker was forked: the agent
// then passes them on at once, not once a fork while the forks want the
// CPU. No exit is reported before them: reaping begins after.
func (s *shim) start() {
	s.groups = make([]int, len(s.spec.Workers))
	starts := make([]shimEvent, 0, len(s.spec.Workers))
	fds := s.fds
	for i, w := range s.spec.Workers {
		files := make([]uintptr, w.fds())
		for k := range files {
			files[k] = uintptr(fds[k])
		}
		fds = fds[w.fds():]
		sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: w.Cred}
		leave, err := s.enterCgroup(w.Cgroup, sys)
		var pid int
		var cpuErr, memErr syscall.Errno
		if err == nil {
			var unbind func()
			unbind, cpuErr, memErr = s.binding.bind(w.CPUs, w.Memory)
			pid, err = syscall.ForkExec(w.Path, w.Argv, &syscall.ProcAttr{Dir: w.Dir, Env: s.spec.env(w), Files: files, Sys: sys})
			unbind()
			leave()
		}
		if err != nil {
			var errno syscall.Errno
			if !errors.As(err, &errno) {
				errno = syscall.EINVAL
			}
			starts = append(starts, shimEvent{Kind: eventStartFailed, Index: i, Errno: errno})
			continue
		}
		s.leaders[pid] = i
		s.groups[i] = pid
		starts = append(starts, shimEvent{Kind: eventStarted, Index: i, Pid: pid, CPUErr: cpuErr, MemErr: memErr})
	}
	for _, fd := range s.fds {
		syscall.Close(fd)
	}
	for _, ev := range starts {
		s.send(ev)
	}
}

// enterCgroup makes the next fork start in cgroup dir: on v2 through
// clone3's CLONE_INTO_CGROUP, on v1 by moving the forking thread there for
// the fork (leave moves it back), so that no byte the worker allocates is
// counted elsewhere. A worker whose cgroup cannot be entered does not start:
// its memory limit would not hold.
func (s *shim) enterCgroup(dir string, sys *syscall.SysProcAttr) (leave func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	if s.spec.CgroupV1Home == "" {
		fd, err := syscall.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		sys.UseCgroupFD, sys.CgroupFD = true, fd
		return func() { syscall.Close(fd) }, nil
	}
	if s.home < 0 {
		// Opened once: every fork goes back through it.
		if s.home, err = openTasks(s.spec.CgroupV1Home); err != nil {
			return nil, err
		}
	}
	fd, err := openTasks(dir)
	if err != nil {
		return nil, err
	}
	err = joinCgroup(fd)
	syscall.Close(fd)
	if err != nil {
		return nil, err
	}
	return func() { joinCgroup(s.home) }, nil
}

// openTasks opens v1 cgroup dir's tasks file for joinCgroup. Plain system
// calls, not os.File's: a cgroup file is pollable, and os would register
// each one with the runtime's poller, four more system calls a fork.
func openTasks(dir string) (int, error) {
	return syscall.Open(dir+"/tasks", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
}

// joinCgroup moves the calling thread, which the shim locked and forks
// from, into the v1 cgroup whose tasks file is open as fd. The kernel moves
// the current thread alone without the lock that a whole process's move
// takes, whose first taking after a quiet spell waits for an RCU grace
// period (5-40 ms on a busy machine); a fork's child starts in its parent
// thread's cgroup.
func joinCgroup(fd int) error {
	_, err := syscall.Write(fd, []byte("0"))
	return err
}

// receiveFDs reads the descriptors the Group passes, close-on-exec, up to
// the message that says it is the last.
func receiveFDs(ctl int) ([]int, error) {
	var fds []int
	body := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*fdsPerMessage))
	for {
		n, oobn, _, _, err := unix.Recvmsg(ctl, body, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, io.EOF
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				return nil, err
			}
			fds = append(fds, got...)
		}
		if body[0] == lastFDs {
			return fds, nil
		}
	}
}

// reap is the shim's only wait: workers and adopted orphans alike. It ends
// when no child is left, which for a subreaper means no descendant either.
func reap(out chan<- reaped) {
	defer close(out)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		out <- reaped{pid, ws}
	}
}

func (s *shim) reaped(r reaped) {
	i, ok := s.leaders[r.pid]
	if !ok {
		return // an adopted orphan
	}
	delete(s.leaders, r.pid)
	ev := shimEvent{Kind: eventExited, Index: i, Pid: r.pid}
	if r.ws.Signaled() {
		ev.Signal = int(r.ws.Signal())
	} else {
		ev.Code = r.ws.ExitStatus()
	}
	s.send(ev)
	// What the worker left in its group gets the grace a stopped job gets.
	pgid := s.groups[i]
	if s.killing {
		syscall.Kill(-pgid, syscall.SIGKILL)
	} else {
		syscall.Kill(-pgid, syscall.SIGTERM)
		time.AfterFunc(s.spec.Grace, func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	}
	if len(s.leaders) == 0 {
		s.cleanup()
	}
}

func (s *shim) command(c shimCommand) {
	switch {
	case c.Leaders:
		for pid := range s.leaders {
			syscall.Kill(pid, c.Signal)
		}
	case c.NoCore && c.Index >= 0 && c.Index < len(s.groups) && s.groups[c.Index] > 0:
		pgid := s.groups[c.Index]
		noCore(pgid)
		for _, p := range descendants(os.Getpid()) {
			if p.pgid == pgid {
				noCore(p.pid)
			}
		}
		syscall.Kill(-pgid, c.Signal)
	case c.Index < 0 && c.Signal == syscall.SIGKILL:
		s.killAll()
	case c.Index < 0:
		s.signalGroups(c.Signal)
		s.signalDescendants(c.Signal)
	case c.Index < len(s.groups) && s.groups[c.Index] > 0:
		syscall.Kill(-s.groups[c.Index], c.Signal)
	}
}

// noCore sets a process's soft limit on core dumps to 1 byte: no core file
// is written, and the kernel skips a core_pattern pipe for that one value
// (for 0 it would still pipe the whole dump).
func noCore(pid int) {
	var old unix.Rlimit
	if unix.Prlimit(pid, unix.RLIMIT_CORE, nil, &old) != nil || old.Max < 1 {
		return
	}
	unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{Cur: 1, Max: old.Max}, nil)
}

// cleanup stops whatever is left once every worker ended or the agent went
// away: SIGTERM to every descendant, SIGKILL after the grace.
func (s *shim) cleanup() {
	if s.cleaning {
		return
	}
	s.cleaning = true
	if s.killing {
		return
	}
	s.signalGroups(syscall.SIGTERM)
	s.signalDescendants(syscall.SIGTERM)
	s.graceUp = time.After(s.spec.Grace)
}

// killAll sends SIGKILL to every descendant, and again every few
// milliseconds, since a dying process may have forked one more.
func (s *shim) killAll() {
	s.cleaning = true
	if s.killing {
		return
	}
	s.killing = true
	s.graceUp = nil
	s.signalGroups(syscall.SIGKILL)
	s.signalDescendants(syscall.SIGKILL)
	s.repeat = time.NewTicker(20 * time.Millisecond)
	s.giveUp = time.After(s.spec.Unkillable)
}

func (s *shim) signalGroups(sig syscall.Signal) {
	for _, pgid := range s.groups {
		if pgid > 0 {
			syscall.Kill(-pgid, sig)
		}
	}
}

// signalDescendants signals every descendant outside the workers' process
// groups, which signalGroups reaches: a worker gets each signal once (a
// second SIGTERM means "quit now" to many programs).
func (s *shim) signalDescendants(sig syscall.Signal) {
	if !hasChildren() {
		return // the common end of a job, spared a read of all of /proc (milliseconds)
	}
	for _, p := range descendants(os.Getpid()) {
		if sig == syscall.SIGKILL || !slices.Contains(s.groups, p.pgid) {
			syscall.Kill(p.pid, sig)
		}
	}
}

// hasChildren says whether the shim has a child, running or not yet
// reaped, without reaping it. A subreaper without children has no
// descendants: an orphan is reparented to the shim itself.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, syscall.ECHILD)
}

func (s *shim) finish() int {
	// A live agent reads what the workers left there first (a failed
	// rank's error file), then removes it.
	if s.spec.JobDir != "" && s.agentGone {
		os.RemoveAll(s.spec.JobDir)
	}
	if dir := s.spec.JobCgroup; dir != "" && s.agentGone {
		// Empty now: every process in them has been reaped. A live agent
		// reads them first (the OOM killer's count), then removes them.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				syscall.Rmdir(dir + "/" + e.Name())
			}
		}
		syscall.Rmdir(dir)
	}
	note := ""
	if len(s.notes) > 0 {
		note = s.notes[0]
	}
	s.send(shimEvent{Kind: eventDone, Note: note})
	return 0
}

// send reports to the agent; once the agent is gone there is no one to tell.
func (s *shim) send(ev shimEvent) {
	_ = s.enc.Encode(ev)
}
