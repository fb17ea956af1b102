package e2e

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/musterhq/muster/testfixture"
)

// Open MPI programs run under --mpi openmpi: Open MPI's mpirun on node rank
// 0, the agents as its remote shell through the job's KV. These need
// Debian's openmpi-bin and libopenmpi-dev; the .openmpi names are used, as
// Debian's plain mpirun may be MPICH's.

// buildOpenMPI compiles pmi/testdata/<name>.c with mpicc.openmpi, or skips.
func buildOpenMPI(t *testing.T, name string) string {
	t.Helper()
	mpicc, err := exec.LookPath("mpicc.openmpi")
	if err != nil {
		t.Skip("mpicc.openmpi is not on PATH: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) to run --mpi openmpi")
	}
	if _, err := exec.LookPath("mpirun.openmpi"); err != nil {
		t.Skip("mpirun.openmpi is not on PATH: install Open MPI (Debian: apt-get install openmpi-bin)")
	}
	return compileMPI(t, mpicc, name)
}

// openMPIArgs run the job under Debian's Open MPI mpirun. Several "nodes"
// here share one host name, where Open MPI's shared-memory transport
// crashes: TCP only, and over loopback alone, where every "node" is. Left to
// itself, the TCP transport takes every address of the host (IPv4 and IPv6
// of each interface), and with several of them Open MPI 4.1's connection
// setup between two ranks sometimes never completes: the job hung in its
// first collective, with nothing on stderr. A job that hangs all the same
// is timed out before the test's own bound, so that the launcher's summary
// names what still ran.
var openMPIArgs = []string{"--mpi", "openmpi", "-x", "MUSTER_MPIRUN=mpirun.openmpi", "-x", "OMPI_MCA_btl=self,tcp",
	"-x", "OMPI_MCA_btl_tcp_if_include=lo", "-x", "OMPI_MCA_oob_tcp_if_include=lo", "--timeout", "45s"}

// openMPILines is what allreduce.c prints for size ranks: all of it comes
// through mpirun, worker 0 of the job.
func openMPILines(size int) []string {
	sum := size * (size - 1) / 2
	var want []string
	for r := range size {
		want = append(want, fmt.Sprintf("[0] rank %d of %d: allreduce %d want %d", r, size, sum, sum))
	}
	slices.Sort(want)
	return want
}

func TestOpenMPIRunEmbedded(t *testing.T) {
	bin := buildOpenMPI(t, "allreduce")
	args := append(append([]string{"run", "--nproc", "4"}, openMPIArgs...), "--", bin)
	checkLines(t, runLauncher(t, args...), openMPILines(4))
}

// Three agents on this machine, two ranks each: nodes b and c run orted
// through the job's KV, with the agent as mpirun's remote shell, never ssh.
func TestOpenMPIThreeAgents(t *testing.T) {
	bin := buildOpenMPI(t, "allreduce")
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "a", "--addr", "127.0.0.1"})
	joinAgent(t, host.addr, "b", "127.0.0.2")
	joinAgent(t, host.addr, "c", "127.0.0.3")
	// Each rank says which remote shell Open MPI has and counts ssh
	// processes, then runs the program.
	script := `ssh=0
for c in /proc/[0-9]*/comm; do
  case $(cat "$c" 2>/dev/null) in ssh*) ssh=$((ssh+1));; esac
done
echo "ssh=$ssh agent=$OMPI_MCA_plm_rsh_agent"
echo "session in job dir: $(case $PMIX_SERVER_TMPDIR in */muster-j-*) echo yes;; *) echo "no, $PMIX_SERVER_TMPDIR";; esac)"
exec "$0"`
	args := append(append([]string{"run", "--cluster", host.addr, "-n", "3", "--nproc", "2", "--wait-timeout", "30s"}, openMPIArgs...),
		"--", "sh", "-c", script, bin)
	r := runLauncher(t, args...)
	want := openMPILines(6)
	for range 6 {
		// Open MPI's session directory is in the job's directory on each
		// node, which the job's end removes, even after a node loss.
		want = append(want, "[0] ssh=0 agent="+agentBin+" rsh", "[0] session in job dir: yes")
	}
	slices.Sort(want)
	checkLines(t, r, want)
}

// MPI_Abort(MPI_COMM_WORLD, 7): mpirun ends the job with 7.
func TestOpenMPIAbort(t *testing.T) {
	bin := buildOpenMPI(t, "abort")
	args := append(append([]string{"run", "--nproc", "4"}, openMPIArgs...), "--", bin)
	r := runLauncher(t, args...)
	if r.code != 7 || !strings.Contains(r.stderr, "mpirun (node ") || !strings.Contains(r.stderr, "exited with code 7") {
		t.Fatalf("exit %d, want 7; stderr:\n%s", r.code, r.stderr)
	}
}
