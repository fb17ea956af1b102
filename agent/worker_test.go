package agent

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

func startTestProcess(t *testing.T, script string) *process {
	t.Helper()
	p, err := startProcess(workerSpec{argv: []string{"sh", "-c", script}, env: []string{"PATH=/usr/bin:/bin"},
		stdout: func([]byte, bool) {}, stderr: func([]byte, bool) {}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProcessExitStatus(t *testing.T) {
	tests := []struct {
		script string
		want   exitStatus
	}{
		{"exit 0", exitStatus{}},
		{"exit 7", exitStatus{code: 7}},
		{"kill -SEGV $$", exitStatus{signal: int(syscall.SIGSEGV)}},
	}
	for _, tt := range tests {
		if got := startTestProcess(t, tt.script).wait(time.Second); got != tt.want {
			t.Errorf("%q: %+v, want %+v", tt.script, got, tt.want)
		}
	}
}

func TestProcessWaitIsBoundedAfterSIGKILL(t *testing.T) {
	p := startTestProcess(t, "exec sleep 1000")
	// Pretend SIGKILL was sent but had no effect, as for a process in D state.
	p.killOnce.Do(func() { close(p.killed) })
	st := p.wait(50 * time.Millisecond)
	if st.signal != int(syscall.SIGKILL) || !strings.Contains(st.err, "after SIGKILL") {
		t.Fatalf("wait = %+v", st)
	}
	p.signal(syscall.SIGKILL)
	if st := <-p.done; st.signal != int(syscall.SIGKILL) {
		t.Fatalf("real SIGKILL: %+v", st)
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := startProcess(workerSpec{argv: []string{"/nonexistent/x"}}); err == nil {
		t.Fatal("started a missing program")
	} else if st := startError("/nonexistent/x", err); st.code != 127 {
		t.Fatalf("missing program: %+v", st)
	}
	if _, err := startProcess(workerSpec{argv: []string{"/etc/hostname"}}); err == nil {
		t.Fatal("started a file that is not a program")
	} else if st := startError("/etc/hostname", err); st.code != 126 {
		t.Fatalf("not a program: %+v", st)
	}
}
