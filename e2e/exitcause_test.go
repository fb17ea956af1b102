package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/cgroup"
	"github.com/musterhq/muster/testwait"
)

// The kernel's reasons for a worker's end reach the launcher's summary: the
// OOM killer in the worker's own cgroup under --memory-limit (the worker
// itself, or a process it started), and a resource limit's signal.
func TestExitCauses(t *testing.T) {
	t.Parallel()
	_, cgErr := cgroup.Open()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cgroups  bool
		args     []string
		code     int
		want     string
		notWants []string
	}{
		{"the OOM killer kills a worker", true,
			[]string{"--nproc", "2", "--memory-limit", "64M", "--", "sh", "-c", `if [ "$RANK" = 1 ]; then exec tail </dev/zero; fi; exec sleep 60`},
			137, "rank 1 (node N, local rank 1) was killed by the kernel's OOM killer (memory limit 64 MiB of its cgroup)", nil},
		{"the OOM killer kills a worker's child", true,
			[]string{"--memory-limit", "48MiB", "--", "sh", "-c", `tail </dev/zero; exit 3`},
			3, "rank 0 (node N, local rank 0) exited with code 3 after the kernel's OOM killer killed one of its processes (memory limit 48 MiB of its cgroup)", nil},
		{"a worker within its limit", true,
			[]string{"--nproc", "2", "--memory-limit", "64M", "--", "sh", "-c", `head -c 1000000 /dev/zero | wc -c`},
			0, "", []string{"OOM"}},
		{"SIGKILL from elsewhere is no OOM kill", true,
			[]string{"--memory-limit", "64M", "--", "sh", "-c", `kill -9 $$`},
			137, "rank 0 (node N, local rank 0) was killed by signal 9 (SIGKILL)", []string{"OOM"}},
		{"a file size limit", false,
			[]string{"--", "sh", "-c", `ulimit -f 1; exec head -c 4096 /dev/zero >"$(mktemp)"`},
			153, "rank 0 (node N, local rank 0) was killed by signal 25 (SIGXFSZ): it wrote past its file size limit (ulimit -f)", nil},
		{"a bad --memory-limit", false, []string{"--memory-limit", "lots", "--", "true"}, 2, "--memory-limit", nil},
		{"a bad --output-ranks", false, []string{"--output-ranks", "3-1", "--", "true"}, 2, "--output-ranks", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.cgroups && cgErr != nil {
				t.Skipf("no cgroups here: %v", cgErr)
			}
			r := runLauncher(t, append([]string{"run", "--embedded"}, tt.args...)...)
			want := strings.ReplaceAll(tt.want, "node N,", "node "+host+",")
			if r.code != tt.code || !strings.Contains(r.stderr, want) {
				t.Fatalf("exit %d, want %d; stderr does not say %q:\n%s", r.code, tt.code, want, r.stderr)
			}
			for _, bad := range tt.notWants {
				if strings.Contains(r.stderr, bad) {
					t.Fatalf("stderr says %q:\n%s", bad, r.stderr)
				}
			}
		})
	}
}

// A launcher killed with SIGKILL leaves no cgroup behind: the job's shim
// removes the job's cgroups once its workers are gone.
func TestCgroupsGoWithAKilledLauncher(t *testing.T) {
	t.Parallel()
	root, err := cgroup.Open()
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	dir := t.TempDir()
	cmd, _, _ := launcher(t, nil, "run", "--embedded", "--nproc", "2", "--memory-limit", "64M", "--",
		"sh", "-c", `cat /proc/self/cgroup >`+dir+`/cgroup-$RANK; exec sleep 1000`)
	// The launcher, and so its agent, runs in this process's cgroup: the
	// job's lies under it, named in its workers' /proc/self/cgroup.
	name := regexp.MustCompile(`/(muster-j-[0-9a-f]+-[^/]+-node0)/rank-[01]\n`)
	var jobDir string
	testwait.Until(t, 20*time.Second, "the workers in their cgroups", func() bool {
		a, _ := os.ReadFile(filepath.Join(dir, "cgroup-0"))
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup-1"))
		m0, m1 := name.FindSubmatch(a), name.FindSubmatch(b)
		if m0 == nil || m1 == nil || string(m0[1]) != string(m1[1]) {
			return false
		}
		jobDir = filepath.Join(root.Dir(), string(m0[1]))
		return true
	})
	if _, err := os.Stat(filepath.Join(jobDir, "rank-1")); err != nil {
		t.Fatalf("the job's cgroup: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	testwait.Until(t, 20*time.Second, "the job's cgroup gone", func() bool {
		_, err := os.Stat(jobDir)
		return os.IsNotExist(err)
	})
}
