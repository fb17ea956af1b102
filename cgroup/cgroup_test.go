package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func TestLocate(t *testing.T) {
	hybridMounts := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	hybridOwn := "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n0::/\n"
	v2Mounts := "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	tests := []struct {
		name           string
		mounts, own    string
		version        Version
		dir, wantError string
	}{
		{"hybrid: memory on v1", hybridMounts, hybridOwn, V1, "/sys/fs/cgroup/memory/process_api/abc", ""},
		{"v2", v2Mounts, "0::/system.slice/muster.service\n", V2, "/sys/fs/cgroup/system.slice/muster.service", ""},
		{"v2 in a container, its cgroup the mount's root", "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			"0::/kubepods/pod1\n", V2, "/sys/fs/cgroup", ""},
		{"v1 memory with a combined controller list", "35 31 0:32 / /cg/mem rw - cgroup cgroup rw,memory,hugetlb\n",
			"4:hugetlb,memory:/a\n", V1, "/cg/mem/a", ""},
		{"no memory controller", "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", "4:memory:/x\n", 0, "",
			"no memory cgroup controller is mounted for this process"},
		{"garbage", "x - y\n\n - \n", "::\nabc\n", 0, "", "no memory cgroup controller is mounted for this process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, dir, err := Locate([]byte(tt.mounts), []byte(tt.own))
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Fatalf("err %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil || v != tt.version || dir != tt.dir {
				t.Fatalf("got v%d %q %v, want v%d %q", v, dir, err, tt.version, tt.dir)
			}
		})
	}
}

func FuzzLocate(f *testing.F) {
	f.Add("35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "4:memory:/a/b\n")
	f.Add("30 23 0:26 /x /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/x/../../y\n")
	f.Fuzz(func(t *testing.T, mounts, own string) {
		_, dir, err := Locate([]byte(mounts), []byte(own))
		if err == nil && dir != filepath.Clean(dir) {
			t.Fatalf("%q is not clean", dir)
		}
	})
}

func TestKeyed(t *testing.T) {
	got := Keyed([]byte("low 0\nhigh 3\noom 2\noom_kill 1\n\nbroken\nx y\n"))
	if got["oom_kill"] != 1 || got["high"] != 3 || len(got) != 4 {
		t.Fatalf("%v", got)
	}
}

func FuzzKeyed(f *testing.F) {
	f.Add("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	f.Fuzz(func(t *testing.T, s string) { Keyed([]byte(s)) })
}

// A worker's cgroup, for real: its limit holds, the OOM killer's kill is
// counted, and the cgroups go once the process has.
func TestWorkerOOMKill(t *testing.T) {
	root, err := Open()
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	job, err := root.NewJob("muster-test-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := job.Remove(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(job.dir); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", job.dir, err)
		}
	})
	run := func(name string, limit int64, script string) (*Worker, *exec.Cmd) {
		w, err := job.Worker(name, limit)
		if err != nil {
			t.Fatal(err)
		}
		// The process waits for a line, to be moved into its cgroup first.
		cmd := exec.Command("sh", "-c", "read go; "+script)
		in, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.Dir(), "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			cmd.Process.Kill()
			t.Fatal(err)
		}
		in.Write([]byte("go\n"))
		cmd.Wait()
		return w, cmd
	}
	w, cmd := run("rank-0", 32<<20, "exec tail </dev/zero")
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the worker ended %v, want SIGKILL", cmd.ProcessState)
	}
	if n, err := w.OOMKills(); n != 1 || err != nil {
		t.Fatalf("OOMKills = %d, %v; want 1", n, err)
	}
	if w.Limit() != 32<<20 {
		t.Fatalf("limit %d", w.Limit())
	}
	w, cmd = run("rank-1", 0, "head -c 100000000 /dev/zero | wc -c >/dev/null")
	if n, err := w.OOMKills(); n != 0 || err != nil || !cmd.ProcessState.Success() {
		t.Fatalf("OOMKills = %d, %v without a limit; %v", n, err, cmd.ProcessState)
	}
}
