package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/musterhq/muster/testfixture"
)

// MPICH programs run under --mpi mpich with no mpiexec: each rank speaks
// PMI-1 to its agent on fd 3. These need Debian's mpich and libmpich-dev.

// buildMPI compiles pmi/testdata/<name>.c, the PMI server's own test
// programs, with mpicc, or skips the test.
func buildMPI(t *testing.T, name string) string {
	t.Helper()
	// Debian's plain mpicc is Open MPI's when both are installed.
	mpicc, err := exec.LookPath("mpicc.mpich")
	if err != nil {
		t.Skip("mpicc.mpich is not on PATH: install MPICH (Debian: apt-get install mpich libmpich-dev) to run MPI programs under --mpi mpich")
	}
	return compileMPI(t, mpicc, name)
}

// pointUCXAtLoopback points UCX at loopback for every test, unless the
// caller's environment says otherwise: every "node" here is this machine,
// and UCX's device scan once failed MPI_Init ("No such device") while
// containers' interfaces came and went.
func pointUCXAtLoopback() {
	for _, kv := range []string{"UCX_NET_DEVICES=lo", "UCX_TLS=self,sm,tcp"} {
		if k, v, _ := strings.Cut(kv, "="); os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

// compileMPI compiles pmi/testdata/<name>.c with mpicc into the test's
// temporary directory.
func compileMPI(t *testing.T, mpicc, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command(mpicc, "-o", bin, filepath.Join("..", "pmi", "testdata", name+".c")).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(mpicc), name, err, out)
	}
	return bin
}

// allreduceLines is what pmi/testdata/allreduce.c prints for size ranks,
// tagged and sorted as sortedLines sorts output.
func allreduceLines(size int) []string {
	sum := size * (size - 1) / 2
	var want []string
	for r := range size {
		want = append(want, fmt.Sprintf("[%d] rank %d of %d: allreduce %d want %d", r, r, size, sum, sum))
	}
	slices.Sort(want)
	return want
}

func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	slices.Sort(lines)
	return lines
}

func checkLines(t *testing.T, r result, want []string) {
	t.Helper()
	if got := sortedLines(r.stdout); r.code != 0 || !slices.Equal(got, want) {
		t.Fatalf("exit %d; stdout (%d lines):\n%s\nwant %d lines:\n%s\nstderr:\n%s",
			r.code, len(got), r.stdout, len(want), strings.Join(want, "\n"), r.stderr)
	}
}

func TestMPIRunEmbedded(t *testing.T) {
	t.Parallel()
	bin := buildMPI(t, "allreduce")
	t.Run("four ranks", func(t *testing.T) {
		checkLines(t, runLauncher(t, "run", "--nproc", "4", "--mpi", "mpich", "--", bin), allreduceLines(4))
	})
	// Each rank looks, while the job runs, for what mpiexec would leave:
	// Hydra's processes and its variables. Its parent is the job's shim.
	t.Run("no mpiexec", func(t *testing.T) {
		script := `hydra=0
for c in /proc/[0-9]*/comm; do
  case $(cat "$c" 2>/dev/null) in mpiexec*|hydra*) hydra=$((hydra+1));; esac
done
vars=$(env | grep -c -e '^HYDI_' -e '^MPIR_CVAR_' -e '^PMI_PORT=' -e '^PMI_ID=')
parent=$(tr '\0' ' ' < /proc/$PPID/cmdline)
echo "hydra=$hydra vars=$vars parent=$parent pmi=$PMI_FD,$PMI_RANK,$PMI_SIZE local=$MPI_LOCALRANKID/$MPI_LOCALNRANKS"
exec "$0"`
		r := runLauncher(t, "run", "--nproc", "2", "--mpi", "mpich", "--", "sh", "-c", script, bin)
		want := append(allreduceLines(2),
			"[0] hydra=0 vars=0 parent=muster-shim  pmi=3,0,2 local=0/2",
			"[1] hydra=0 vars=0 parent=muster-shim  pmi=3,1,2 local=1/2")
		slices.Sort(want)
		checkLines(t, r, want)
	})
	t.Run("64 ranks", func(t *testing.T) {
		checkLines(t, runLauncher(t, "run", "--nproc", "64", "--mpi", "mpich", "--", bin), allreduceLines(64))
	})
}

// Rank 1 calls MPI_Abort(MPI_COMM_WORLD, 7) and, as MPICH 4.0.2 does, waits
// to be killed; the others wait in a barrier. The job fails with 7, names
// the rank, and leaves no process.
func TestMPIAbort(t *testing.T) {
	t.Parallel()
	bin := buildMPI(t, "abort")
	marker := "MUSTER_E2E_MPI_ABORT=" + strconv.Itoa(os.Getpid())
	r := runLauncher(t, "run", "--nproc", "4", "--mpi", "mpich", "-x", marker, "--", bin)
	host, _ := os.Hostname()
	msg := fmt.Sprintf("failed: rank 1 (node %s, local rank 1): called MPI_Abort with exit code 7; exit code 7\n", host)
	if r.code != 7 || !strings.Contains(r.stderr, msg) {
		t.Fatalf("exit %d, want 7 and %q; stderr:\n%s", r.code, msg, r.stderr)
	}
	if left := jobProcesses(t, marker); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// Three agents on this machine, two ranks each: each node's PMI barrier
// meets the others' through the store's KV.
func TestMPIThreeAgents(t *testing.T) {
	t.Parallel()
	bin := buildMPI(t, "allreduce")
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "a", "--addr", "127.0.0.1"})
	joinAgent(t, host.addr, "b", "127.0.0.2")
	joinAgent(t, host.addr, "c", "127.0.0.3")
	r := runLauncher(t, "run", "--cluster", host.addr, "-n", "3", "--nproc", "2", "--wait-timeout", "30s", "--mpi", "mpich", "--", bin)
	checkLines(t, r, allreduceLines(6))
}

// Under --mpi every rank is an MPI program: one that exits 0 without
// MPI_Finalize fails the job (its peers would wait for it in a barrier).
func TestMPIExitWithoutFinalize(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--nproc", "2", "--mpi", "mpich", "--stdin", "none", "--", "sh", "-c", `[ "$PMI_RANK" = 1 ] || sleep 30`)
	host, _ := os.Hostname()
	// A program that never speaks PMI is not taken for one that did and
	// stopped short of MPI_Finalize.
	msg := fmt.Sprintf("failed: rank 1 (node %s, local rank 1): exited with code 0 without a word of PMI: not an MPICH program? "+
		"(Open MPI programs need --mpi openmpi); exit code 1\n", host)
	if r.code != 1 || !strings.Contains(r.stderr, msg) {
		t.Fatalf("exit %d, want 1 and %q; stderr:\n%s", r.code, msg, r.stderr)
	}
}

func TestMPIFlag(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--mpi", "lam", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, `--mpi "lam": want mpich or openmpi`) {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
