package supervise

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

func TestMain(m *testing.M) {
	runInitHelperIfRequested()
	os.Exit(testfixture.CheckNoneLeft(m.Run, 5*time.Second))
}

// marked lists live processes whose environment holds marker.
func marked(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(marker)) {
			continue
		}
		if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); bytes.Contains(st, []byte(") Z ")) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

type testJob struct {
	g      *Group
	marker string
	out    []*bytes.Buffer
	lines  []chan string // each worker's lines as they come
	read   chan struct{}
}

// startShell runs one sh -c script per worker, its stdout and stderr read
// into a buffer, line by line.
func startShell(t *testing.T, grace time.Duration, scripts ...string) *testJob {
	t.Helper()
	j := &testJob{marker: fmt.Sprintf("MUSTER_TEST_MARK=%d", time.Now().UnixNano()), read: make(chan struct{}, 2*len(scripts))}
	var spec Spec
	spec.Grace = grace
	for _, sc := range scripts {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		buf, lines := &bytes.Buffer{}, make(chan string, 64)
		j.out, j.lines = append(j.out, buf), append(j.lines, lines)
		go func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				buf.WriteString(sc.Text() + "\n")
				select {
				case lines <- sc.Text():
				default: // nobody waits for this many
				}
			}
			r.Close()
			j.read <- struct{}{}
		}()
		w2, err := dupFile(w)
		if err != nil {
			t.Fatal(err)
		}
		spec.Workers = append(spec.Workers, Worker{Path: "/bin/sh", Argv: []string{"sh", "-c", sc},
			Env: []string{"PATH=/usr/bin:/bin", j.marker}, Stdout: w, Stderr: w2})
	}
	g, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	j.g = g
	t.Cleanup(func() {
		g.SignalAll(syscall.SIGKILL)
		<-g.Done()
	})
	return j
}

// waitLine waits for worker i to print line.
func (j *testJob) waitLine(t *testing.T, i int, line string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-j.lines[i]:
			if got == line {
				return
			}
		case <-timeout:
			t.Fatalf("worker %d did not print %q", i, line)
		}
	}
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// events gathers every event until the group is done.
func (j *testJob) events(t *testing.T) map[int]Event {
	t.Helper()
	exits := map[int]Event{}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-j.g.Events():
			if !ok {
				return exits
			}
			if ev.Kind != Started {
				exits[ev.Index] = ev
			}
		case <-timeout:
			t.Fatal("group did not end")
		}
	}
}

func TestExitStatuses(t *testing.T) {
	j := startShell(t, time.Second, "echo hi", "exit 7", "kill -SEGV $$")
	exits := j.events(t)
	want := map[int]Event{0: {Kind: Exited}, 1: {Kind: Exited, Code: 7}, 2: {Kind: Exited, Signal: int(syscall.SIGSEGV)}}
	for i, w := range want {
		got := exits[i]
		if got.Kind != w.Kind || got.Code != w.Code || got.Signal != w.Signal {
			t.Errorf("worker %d: %+v, want %+v", i, got, w)
		}
	}
	for range 3 {
		<-j.read
	}
	if j.out[0].String() != "hi\n" {
		t.Errorf("output %q", j.out[0].String())
	}
}

func TestStartFailure(t *testing.T) {
	var spec Spec
	r, w, _ := os.Pipe()
	defer r.Close()
	spec.Workers = []Worker{{Path: "/nonexistent/prog", Argv: []string{"prog"}, Stdout: w}}
	g, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	ev := <-g.Events()
	if ev.Kind != StartFailed || ev.Err != syscall.ENOENT {
		t.Fatalf("event %+v, want a start failure with ENOENT", ev)
	}
	<-g.Done()
}

func TestNoDescendantOutlivesTheJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		end    func(*testJob)
	}{
		// A child that left the worker's session and group survives a clean exit today.
		{"setsid child of a clean worker", `setsid sleep 1000 & sleep 0.5; exit 0`, nil},
		{"double fork", `(sh -c 'sleep 1000 &' &); sleep 0.5; exit 0`, nil},
		{"stopped job", `setsid sleep 1000 & sleep 1000`, func(j *testJob) { j.g.SignalAll(syscall.SIGTERM) }},
		{"killed job, TERM ignored", `trap "" TERM; setsid sh -c 'trap "" TERM; sleep 1000' & sleep 1000`, func(j *testJob) {
			j.g.SignalAll(syscall.SIGKILL)
		}},
		// The agent died: its end of the control socket closed.
		{"agent gone", `setsid sleep 1000 & sleep 1000`, func(j *testJob) { j.g.conn.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := startShell(t, 200*time.Millisecond, tt.script)
			testwait.Until(t, 5*time.Second, "the worker to start its child", func() bool { return len(marked(j.marker)) >= 2 })
			if tt.end != nil {
				tt.end(j)
			}
			select {
			case <-j.g.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the group did not end; left: %v", marked(j.marker))
			}
			if left := marked(j.marker); len(left) > 0 {
				t.Fatalf("processes outlived the job: %v", left)
			}
		})
	}
}

func TestBackgroundChildGetsTermAndGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The child needs a moment after SIGTERM to write its file: the grace gives it that.
	script := fmt.Sprintf(`sh -c 'trap "sleep 0.3; echo bye > %s/term; exit 0" TERM; while :; do sleep 0.05; done' & sleep 0.2; exit 0`, dir)
	j := startShell(t, 5*time.Second, script)
	exits := j.events(t)
	if exits[0].Code != 0 {
		t.Fatalf("worker: %+v", exits[0])
	}
	b, err := os.ReadFile(filepath.Join(dir, "term"))
	if err != nil || strings.TrimSpace(string(b)) != "bye" {
		t.Fatalf("the background child was not given SIGTERM and time to finish: %v", err)
	}
}

func TestJobDirRemovedEvenIfTheAgentDies(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "muster-j-test")
	os.Mkdir(dir, 0o700)
	r, w, _ := os.Pipe()
	defer r.Close()
	g, err := Start(Spec{Grace: 100 * time.Millisecond, JobDir: dir,
		Workers: []Worker{{Path: "/bin/sleep", Argv: []string{"sleep", "1000"}, Stdout: w}}})
	if err != nil {
		t.Fatal(err)
	}
	<-g.Events()
	g.conn.Close()
	<-g.Done()
	testwait.Until(t, 5*time.Second, "the job directory to go", func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})
}

func TestStopWithGrace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		grace  time.Duration
		want   syscall.Signal // what ended the worker
	}{
		{"SIGTERM suffices", `echo ready; sleep 1000`, time.Second, syscall.SIGTERM},
		{"SIGKILL after the grace", `trap "" TERM; echo ready; sleep 1000 & wait; sleep 1000`, 200 * time.Millisecond, syscall.SIGKILL},
		{"no grace kills at once", `trap "" TERM; echo ready; sleep 1000`, 0, syscall.SIGKILL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := startShell(t, time.Minute, tt.script)
			j.waitLine(t, 0, "ready")
			j.g.Stop(tt.grace)
			exits := j.events(t)
			if exits[0].Signal != int(tt.want) {
				t.Fatalf("worker ended %+v, want signal %d", exits[0], tt.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := j.g.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if left := marked(j.marker); len(left) > 0 {
				t.Fatalf("processes left: %v", left)
			}
		})
	}
}

// A second Stop with a shorter grace kills sooner: a job already stopping
// with a long kill timeout is killed when its agent goes away.
func TestStopAgainWithShorterGrace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		graces []time.Duration
	}{
		{"shorter", []time.Duration{time.Minute, 200 * time.Millisecond}},
		{"none", []time.Duration{time.Minute, 0}},
		{"longer changes nothing", []time.Duration{200 * time.Millisecond, time.Minute}},
		{"shorter after longer", []time.Duration{time.Minute, 2 * time.Minute, 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := startShell(t, time.Minute, `trap "" TERM; echo ready; sleep 1000 & wait; sleep 1000`)
			j.waitLine(t, 0, "ready")
			for _, g := range tt.graces {
				j.g.Stop(g)
			}
			select {
			case <-j.g.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the worker outlived a stop with graces %v", tt.graces)
			}
		})
	}
}

// A stop gives each worker one SIGTERM: many programs take a second one as
// "quit now, skip the graceful part".
func TestStopSignalsEachWorkerOnce(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "terms")
	j := startShell(t, 5*time.Second, fmt.Sprintf(`trap 'echo term >> %s; sleep 0.3; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, f))
	j.waitLine(t, 0, "ready")
	j.g.Stop(5 * time.Second)
	j.events(t)
	if b, _ := os.ReadFile(f); strings.Count(string(b), "term") != 1 {
		t.Fatalf("the worker got SIGTERM %d times, want once", strings.Count(string(b), "term"))
	}
}

// An MPI worker gets its PMI socket as fd 3; the workers around it get no
// fd 3, and their own three descriptors are where they were.
func TestPMIDescriptor(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "pmi"), os.NewFile(uintptr(fds[1]), "pmi-worker")
	defer ours.Close()
	scripts := []string{
		`[ -e /proc/$$/fd/3 ] && echo has-fd-3 || echo no-fd-3`,
		`echo pmi-hello >&3; [ -e /proc/$$/fd/4 ] && echo has-fd-4 || echo no-fd-4`,
		`[ -e /proc/$$/fd/3 ] && echo has-fd-3 || echo no-fd-3`,
	}
	var spec Spec
	spec.Grace = time.Second
	var outs []*os.File
	for i, sc := range scripts {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, r)
		wk := Worker{Path: "/bin/sh", Argv: []string{"sh", "-c", sc}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: w}
		if i == 1 {
			wk.PMI = theirs
		}
		spec.Workers = append(spec.Workers, wk)
	}
	g, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.SignalAll(syscall.SIGKILL)
		<-g.Done()
	})
	want := []string{"no-fd-3\n", "no-fd-4\n", "no-fd-3\n"}
	for i, r := range outs {
		got, _ := io.ReadAll(r)
		r.Close()
		if string(got) != want[i] {
			t.Errorf("worker %d: %q, want %q", i, got, want[i])
		}
	}
	got, _ := io.ReadAll(ours)
	if string(got) != "pmi-hello\n" {
		t.Errorf("from the PMI socket: %q", got)
	}
	<-g.Done()
}
