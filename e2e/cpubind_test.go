package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
	"github.com/musterhq/muster/topology"
)

// --cpu-bind on the embedded default: each worker runs on the CPUs its
// binding names, and --report-bindings says it bound them; with cores, the
// workers' CPUs are disjoint. OMP_NUM_THREADS stays torchrun's 1 for several
// workers, bound or not (bench/RESULTS.md says why). torchrun's
// --numa-binding names are taken; an unknown mode is refused, naming the
// flag.
func TestCPUBind(t *testing.T) {
	t.Parallel()
	allowed := ownAllowedCPUs(t)
	if len(allowed) < 2 {
		t.Skip("one CPU allowed: nothing to bind apart")
	}
	script := `echo "$RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2) $OMP_NUM_THREADS"`
	report := regexp.MustCompile(`^muster: rank (\d) \(node \S+, local rank \d\): no GPUs, CPUs (\S+) \(bound: (\w+), (\d+) core\(s\); no GPUs: (all|a share of the) allowed CPUs\)$`)
	for _, tc := range []struct {
		flags    []string
		mode     string
		disjoint bool
	}{
		{[]string{"--cpu-bind", "cores"}, "cores", true},
		{[]string{"--numa-binding", "exclusive"}, "cores", true},
		{[]string{"--cpu-bind", "numa"}, "numa", false},
		{[]string{"--numa-binding=node"}, "numa", false},
	} {
		t.Run(strings.Join(tc.flags, " "), func(t *testing.T) {
			args := append([]string{"run", "--nproc", "2", "--report-bindings"}, tc.flags...)
			r := runLauncher(t, append(args, "sh", "-c", script)...)
			if r.code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			reported := map[string]string{}
			for l := range strings.SplitSeq(strings.TrimSpace(r.stderr), "\n") {
				m := report.FindStringSubmatch(l)
				if m == nil || m[3] != tc.mode {
					t.Errorf("line %q: not a %s binding", l, tc.mode)
					continue
				}
				reported[m[1]] = m[2]
			}
			var sets []topology.CPUSet
			for l := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
				f := strings.Fields(strings.TrimPrefix(l, "["+strings.SplitN(l, "]", 2)[0][1:]+"] "))
				if len(f) != 3 {
					t.Fatalf("output line %q: want RANK CPUS OMP_NUM_THREADS", l)
				}
				cpus, err := topology.ParseCPUList(f[1])
				if err != nil || len(cpus) == 0 || len(cpus.Intersect(allowed)) != len(cpus) {
					t.Errorf("rank %s runs on %q, not a part of the allowed %s", f[0], f[1], allowed)
				}
				if reported[f[0]] != f[1] {
					t.Errorf("rank %s runs on %s, its binding said %q", f[0], f[1], reported[f[0]])
				}
				if f[2] != "1" {
					t.Errorf("rank %s: OMP_NUM_THREADS %q, want 1 as for any two workers", f[0], f[2])
				}
				sets = append(sets, cpus)
			}
			if len(sets) != 2 {
				t.Fatalf("%d ranks' lines, want 2; stdout:\n%s", len(sets), r.stdout)
			}
			if tc.disjoint && len(sets[0].Intersect(sets[1])) > 0 {
				t.Errorf("cores: ranks share CPUs: %s and %s", sets[0], sets[1])
			}
		})
	}
	r := runLauncher(t, "run", "--cpu-bind", "closest", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "--cpu-bind") || !strings.Contains(r.stderr, "want none, numa, socket or cores") {
		t.Errorf("--cpu-bind closest: exit %d, stderr %q; want 2 and an error naming the flag and the modes", r.code, r.stderr)
	}
}

// launcher jobs JOB shows where each worker of the job's round ran, and
// whether it was bound.
func TestJobShowsBindings(t *testing.T) {
	t.Parallel()
	if len(ownAllowedCPUs(t)) < 2 {
		t.Skip("one CPU allowed: nothing to bind apart")
	}
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "binder"})
	r := runLauncher(t, "run", "--cluster", host.addr, "--nproc", "2", "--cpu-bind", "cores", "--", "echo", "bound job")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	job := jobListed(t, runLauncher(t, "jobs", "--cluster", host.addr).stdout, "bound job")
	one := runLauncher(t, "jobs", "--cluster", host.addr, job)
	worker := regexp.MustCompile(`(?m)^worker:\s+rank (\d) \(node binder, local rank \d\): no GPUs, CPUs \S+ \(bound: cores, \d+ core\(s\)[^)]*\), pid \d+$`)
	var ranks []string
	for _, m := range worker.FindAllStringSubmatch(one.stdout, -1) {
		ranks = append(ranks, m[1])
	}
	if !slices.Equal(ranks, []string{"0", "1"}) {
		t.Errorf("launcher jobs %s: worker lines for ranks %v, want 0 and 1:\n%s%s", job, ranks, one.stdout, one.stderr)
	}
}

// A job bound with cores beside another on the same agent takes cores the
// other does not hold where there are any; where there are none it shares
// them and its report says so, until the other job ends.
func TestCoresBesideAnotherJob(t *testing.T) {
	t.Parallel()
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "beside"})
	dir := t.TempDir()
	up, done := filepath.Join(dir, "up"), filepath.Join(dir, "go")
	first, out, errb := launcher(t, nil, "run", "--cluster", host.addr, "--nproc", "1", "--cpu-bind", "cores", "--",
		"sh", "-c", fmt.Sprintf("touch %s; while [ ! -e %s ]; do sleep 0.05; done", up, done))
	testwait.UntilShowing(t, 30*time.Second, "the first job's worker to start", func() bool {
		_, err := os.Stat(up)
		return err == nil
	}, func() string { return processTree(first.Process.Pid) })
	const shared = "cores shared with another job's workers"
	// One worker takes every core of its binding: the next job has none free.
	beside := runLauncher(t, "run", "--cluster", host.addr, "--nproc", "1", "--cpu-bind", "cores", "--report-bindings", "--", "true")
	if beside.code != 0 || !strings.Contains(beside.stderr, shared) {
		t.Errorf("a job beside a bound one: exit %d, stderr %q; want 0 and a report saying %q", beside.code, beside.stderr, shared)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, first, out, errb); r.code != 0 {
		t.Fatalf("first job: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	after := runLauncher(t, "run", "--cluster", host.addr, "--nproc", "1", "--cpu-bind", "cores", "--report-bindings", "--", "true")
	if after.code != 0 || strings.Contains(after.stderr, shared) || !strings.Contains(after.stderr, "bound: cores") {
		t.Errorf("a job after it ended: exit %d, stderr %q; want 0 and cores of its own", after.code, after.stderr)
	}
}

// ownAllowedCPUs is the CPUs this test may run on, which its launchers and
// agents inherit.
func ownAllowedCPUs(t *testing.T) topology.CPUSet {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			set, err := topology.ParseCPUList(v)
			if err != nil {
				t.Fatal(err)
			}
			return set
		}
	}
	t.Fatal("no Cpus_allowed_list in /proc/self/status")
	return nil
}
