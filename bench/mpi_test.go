package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkMPIInit starts N ranks of an MPICH program that calls MPI_Init
// and MPI_Finalize only: `launcher run --nproc N --mpi mpich` (the agent
// serves PMI, no mpiexec) against MPICH's own `mpiexec.hydra -n N`, in turn
// within each iteration; it reports each one's median wall time and their
// ratio.
func BenchmarkMPIInit(b *testing.B) {
	mpicc, err := exec.LookPath("mpicc.mpich")
	if err != nil {
		b.Skip("mpicc.mpich not installed (Debian: apt-get install mpich libmpich-dev)")
	}
	hydra, err := exec.LookPath("mpiexec.hydra")
	if err != nil {
		b.Skip("mpiexec.hydra not installed (Debian: apt-get install mpich)")
	}
	// Every rank is on this machine: UCX needs loopback only (see e2e/mpi_test.go).
	for k, v := range map[string]string{"UCX_NET_DEVICES": "lo", "UCX_TLS": "self,sm,tcp"} {
		if os.Getenv(k) == "" {
			b.Setenv(k, v)
		}
	}
	launcher := buildLauncher(b)
	prog := filepath.Join(b.TempDir(), "mpi_init")
	if out, err := exec.Command(mpicc, "-o", prog, "testdata/mpi_init.c").CombinedOutput(); err != nil {
		b.Fatalf("mpicc: %v\n%s", err, out)
	}
	compareLaunchers(b, "mpiexec", func(np string) [][]string {
		return [][]string{
			{launcher, "run", "--embedded", "--nproc", np, "--mpi", "mpich", "--", prog},
			{hydra, "-n", np, prog},
		}
	})
}

// BenchmarkOpenMPIInit is BenchmarkMPIInit for Open MPI: `launcher run
// --nproc N --mpi openmpi` (mpirun started by the agent, which is its
// remote shell) against `mpirun -np N` itself.
func BenchmarkOpenMPIInit(b *testing.B) {
	mpicc, err := exec.LookPath("mpicc.openmpi")
	if err != nil {
		b.Skip("mpicc.openmpi not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	}
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		b.Skip("mpirun.openmpi not installed (Debian: apt-get install openmpi-bin)")
	}
	b.Setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
	b.Setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
	launcher := buildLauncher(b)
	prog := filepath.Join(b.TempDir(), "mpi_init")
	if out, err := exec.Command(mpicc, "-o", prog, "testdata/mpi_init.c").CombinedOutput(); err != nil {
		b.Fatalf("mpicc: %v\n%s", err, out)
	}
	compareLaunchers(b, "mpirun", func(np string) [][]string {
		return [][]string{
			{launcher, "run", "--embedded", "--nproc", np, "--mpi", "openmpi", "-x", "MUSTER_MPIRUN=" + mpirun, "--", prog},
			{mpirun, "--oversubscribe", "-np", np, prog},
		}
	})
}

// compareLaunchers times, for 4, 16 and 64 ranks, muster's command and its
// peer's (cmds' two lines) in turn within each iteration, after one warm-up
// run of each; it reports each one's median wall time and their ratio.
func compareLaunchers(b *testing.B, peer string, cmds func(np string) [][]string) {
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			lines := cmds(strconv.Itoa(n))
			for _, argv := range lines { // warm caches once
				timed(b, argv)
			}
			times := make([][]time.Duration, len(lines))
			b.ResetTimer()
			for range b.N {
				for j, argv := range lines {
					d, _ := timed(b, argv)
					times[j] = append(times[j], d)
				}
			}
			b.StopTimer()
			muster, other := median(times[0]), median(times[1])
			b.ReportMetric(float64(muster.Microseconds())/1000, "muster-ms")
			b.ReportMetric(float64(other.Microseconds())/1000, peer+"-ms")
			b.ReportMetric(float64(muster)/float64(other), "muster/"+peer)
			b.ReportMetric(0, "ns/op")
		})
	}
}
