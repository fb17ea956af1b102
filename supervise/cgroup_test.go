package supervise

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/cgroup"
)

// A worker with a cgroup starts in it, and the shim leaves it; a worker
// whose cgroup cannot be entered does not start; the job's cgroups stay for
// the live agent to read (the shim removes them only after its agent died).
func TestWorkerStartsInItsCgroup(t *testing.T) {
	root, err := cgroup.Open()
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	job, err := root.NewJob("muster-supervise-test-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := job.Remove(); err != nil {
			t.Error(err)
		}
	})
	cw, err := job.Worker("rank-0", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Grace: time.Second, Workers: []Worker{
		{Path: sh, Argv: []string{"sh", "-c", "cat /proc/self/cgroup"}, Stdout: w},
		{Path: sh, Argv: []string{"sh", "-c", "true"}, Cgroup: cw.Dir() + "-missing"},
	}}
	spec.Workers[0].Cgroup = cw.Dir()
	spec.JobCgroup = job.Dir()
	if root.Version() == cgroup.V1 {
		spec.CgroupV1Home = root.Dir()
	}
	g, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	var startErr error
	for ev := range g.Events() {
		if ev.Kind == StartFailed {
			startErr = ev.Err
		}
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := new(bytes.Buffer)
	out.ReadFrom(r)
	// The cgroup as the kernel names it, relative to its hierarchy's root.
	name := cw.Dir()[strings.Index(cw.Dir(), "/muster-supervise-test-"):]
	if !strings.Contains(out.String(), name+"\n") {
		t.Fatalf("the worker's cgroups:\n%s\nwant one ending %s", out, name)
	}
	if !errors.Is(startErr, syscall.ENOENT) {
		t.Fatalf("the worker whose cgroup is missing: %v, want ENOENT", startErr)
	}
	if kills, err := cw.OOMKills(); err != nil || kills != 0 {
		t.Fatalf("the worker's cgroup, once the shim ended: %d OOM kills, %v", kills, err)
	}
}
