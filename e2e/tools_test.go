package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostlistAndHostfileCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("# two nodes\nnode01 slots=4\nnode02 slots=4 # trailing\n"), 0o644)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("node01 slots=4\nnode02 slots=x\n"), 0o644)
	tests := []struct {
		name string
		args []string
		env  []string
		code int
		out  string
		err  string
	}{
		{"expand", []string{"hostlist", "expand", "node[01-03],gpu[8-9]"}, nil, 0, "node01\nnode02\nnode03\ngpu8\ngpu9\n", ""},
		{"compress", []string{"hostlist", "compress", "node01", "node02", "node03"}, nil, 0, "node[01-03]\n", ""},
		{"bad hostlist", []string{"hostlist", "expand", "node[3-1]"}, nil, 1, "", "runs backwards (3 > 1)"},
		{"openmpi to deepspeed", []string{"hostfile", "--format", "deepspeed", "--hostfile", hosts}, nil, 0, "node01 slots=4\nnode02 slots=4\n", ""},
		{"openmpi to mpich", []string{"hostfile", "--format", "mpich", "--hostfile", hosts}, nil, 0, "node01:4\nnode02:4\n", ""},
		{"-H", []string{"hostfile", "--format", "mpich", "-H", "a:2,b"}, nil, 0, "a:2\nb:1\n", ""},
		{"slurm allocation", []string{"hostfile", "--format", "openmpi"},
			[]string{"SLURM_JOB_NODELIST=gpu[1-2]", "SLURM_TASKS_PER_NODE=8(x2)"}, 0, "gpu1 slots=8\ngpu2 slots=8\n", ""},
		{"bad file names its line", []string{"hostfile", "--format", "mpich", "--hostfile", bad}, nil, 2, "", bad + ":2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, out, errb := launcher(t, tt.env, tt.args...)
			r := wait(t, cmd, out, errb)
			if r.code != tt.code || r.stdout != tt.out || !strings.Contains(r.stderr, tt.err) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", r.code, r.stdout, r.stderr, tt.code, tt.out, tt.err)
			}
		})
	}
}

func TestDoctorExplainsItself(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "doctor", "--master", "127.0.0.1")
	if r.code != 0 || !strings.Contains(r.stdout, "NCCL_SOCKET_IFNAME") || !strings.Contains(r.stdout, "=lo") {
		t.Fatalf("doctor: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestBenchOutsideAJobSaysSo(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "bench", "allreduce", "-b", "8", "-e", "1M")
	if r.code == 0 || !strings.Contains(r.stderr, "launcher run") {
		t.Fatalf("bench outside muster: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runLauncher(t, "bench", "allreduce", "-b", "nonsense")
	if r.code != 2 || !strings.Contains(r.stderr, "nonsense") {
		t.Fatalf("bad size: exit %d, stderr %q", r.code, r.stderr)
	}
}
