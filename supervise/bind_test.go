package supervise

import (
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Each worker starts on the CPUs and with the memory policy it was given,
// and one given none keeps the agent's: the shim undoes each binding after
// its fork. A binding the kernel refuses starts the worker unbound, saying
// why.
func TestBinding(t *testing.T) {
	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	allowed := statusLine(string(own), "Cpus_allowed_list:")
	if allowed == "0" {
		t.Skip("one CPU allowed: nothing to bind apart")
	}
	report := `grep Cpus_allowed_list /proc/self/status | cut -f2; grep -m1 -o 'prefer[a-z]*:[0-9,-]*\|default' /proc/self/numa_maps`
	workers := []struct {
		cpus, memory []int
		want         string
		cpuErr       error
	}{
		{[]int{1}, []int{0}, "1\nprefer:0\n", nil},
		{nil, nil, allowed + "\ndefault\n", nil},
		{[]int{0}, nil, "0\ndefault\n", nil},
		{[]int{maxBindCPUs + 1}, nil, allowed + "\ndefault\n", syscall.EINVAL},
	}
	var spec Spec
	spec.Grace = time.Second
	var outs []*os.File
	for _, w := range workers {
		r, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, r)
		spec.Workers = append(spec.Workers, Worker{Path: "/bin/sh", Argv: []string{"sh", "-c", report}, Env: []string{"PATH=/usr/bin:/bin"},
			Stdout: wr, CPUs: w.cpus, Memory: w.memory})
	}
	g, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.SignalAll(syscall.SIGKILL)
		<-g.Done()
	})
	for i, r := range outs {
		got, _ := io.ReadAll(r)
		r.Close()
		if string(got) != workers[i].want {
			t.Errorf("worker %d: %q, want %q", i, got, workers[i].want)
		}
	}
	for ev := range g.Events() {
		if ev.Kind == Started && !errors.Is(ev.CPUErr, workers[ev.Index].cpuErr) && ev.CPUErr != workers[ev.Index].cpuErr {
			t.Errorf("worker %d: CPUErr %v, want %v", ev.Index, ev.CPUErr, workers[ev.Index].cpuErr)
		}
		if ev.Kind == Started && ev.MemErr != nil {
			t.Errorf("worker %d: MemErr %v", ev.Index, ev.MemErr)
		}
	}
}

func statusLine(status, name string) string {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
