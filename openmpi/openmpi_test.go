package openmpi

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestArgvLaunch(t *testing.T) {
	dir := t.TempDir()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	n := Node{Self: "/bin/agent", Dir: dir, Names: []string{"a", "b", "c"}, Slots: 2,
		Env: []string{"NCCL_SOCKET_IFNAME=eth1", "MUSTER_MPIRUN=mpirun.openmpi"}, Argv: []string{"./app", "-v"}, Root: true}
	got, err := Argv(0, n)
	if err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(dir, HostfileName)
	want := []string{"/bin/agent", "mpi-launch", dir, "--", "mpirun.openmpi", "-np", "6", "--hostfile", hf,
		"--mca", "plm", "rsh", "--mca", "plm_rsh_agent", "/bin/agent rsh",
		"--mca", "oob_tcp_if_include", "eth1", "--mca", "btl_tcp_if_include", "eth1",
		"--allow-run-as-root", "./app", "-v"}
	if !slices.Equal(got, want) {
		t.Errorf("argv\n%q\nwant\n%q", got, want)
	}
	b, err := os.ReadFile(hf)
	if err != nil {
		t.Fatal(err)
	}
	if want := host + " slots=2\nb slots=2\nc slots=2\n"; string(b) != want {
		t.Errorf("hostfile %q, want %q", b, want)
	}
}

// An interface list or exclusion is NCCL's syntax, not Open MPI's: mpirun
// then picks its own interfaces.
func TestArgvLaunchPlain(t *testing.T) {
	n := Node{Self: "/bin/agent", Dir: t.TempDir(), Names: []string{"a"}, Slots: 4,
		Env: []string{"NCCL_SOCKET_IFNAME=^docker0"}, Argv: []string{"./app"}}
	got, err := Argv(0, n)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/agent", "mpi-launch", n.Dir, "--", "mpirun", "-np", "4", "--hostfile", filepath.Join(n.Dir, HostfileName),
		"--mca", "plm", "rsh", "--mca", "plm_rsh_agent", "/bin/agent rsh", "./app"}
	if !slices.Equal(got, want) {
		t.Errorf("argv\n%q\nwant\n%q", got, want)
	}
}

func TestArgvDaemon(t *testing.T) {
	got, err := Argv(2, Node{Self: "/bin/agent", Dir: "/tmp/muster-j-1.2"})
	if err != nil || !slices.Equal(got, []string{"/bin/agent", "mpi-daemon", "/tmp/muster-j-1.2"}) {
		t.Errorf("Argv = %q, %v", got, err)
	}
}

// Open MPI's session directory goes in the job's directory, unless the user
// placed it.
func TestSessionDirEnv(t *testing.T) {
	tests := []struct {
		env  []string
		want []string
	}{
		{[]string{"A=1", "TMPDIR=/tmp"}, []string{"A=1", "TMPDIR=/tmp", "TMPDIR=/j"}},
		{[]string{"OMPI_MCA_orte_tmpdir_base=/mine"}, []string{"OMPI_MCA_orte_tmpdir_base=/mine"}},
		{[]string{"OMPI_MCA_orte_remote_tmpdir_base=/mine"}, []string{"OMPI_MCA_orte_remote_tmpdir_base=/mine"}},
	}
	for _, tt := range tests {
		if got := sessionDirEnv(tt.env, "/j"); !slices.Equal(got, tt.want) {
			t.Errorf("sessionDirEnv(%q) = %q, want %q", tt.env, got, tt.want)
		}
	}
}

// rsh refuses a host that is not one of the job's other nodes before it
// reaches the store.
func TestRSHUnknownHost(t *testing.T) {
	hf := filepath.Join(t.TempDir(), HostfileName)
	if err := os.WriteFile(hf, []byte("here slots=1\nb slots=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(HostfileVar, hf)
	for _, host := range []string{"x", "here"} {
		if code := runRSH([]string{host, "orted", "-mca", "x"}); code != 1 {
			t.Errorf("rsh %s: exit %d, want 1", host, code)
		}
	}
	if code := runRSH([]string{"b"}); code != 2 {
		t.Errorf("rsh without a command: exit %d, want 2", code)
	}
}
