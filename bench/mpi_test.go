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
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			np := strconv.Itoa(n)
			cmds := [][]string{
				{launcher, "run", "--nproc", np, "--mpi", "mpich", "--", prog},
				{hydra, "-n", np, prog},
			}
			for _, argv := range cmds { // warm caches once
				timed(b, argv)
			}
			times := make([][]time.Duration, len(cmds))
			b.ResetTimer()
			for range b.N {
				for j, argv := range cmds {
					d, _ := timed(b, argv)
					times[j] = append(times[j], d)
				}
			}
			b.StopTimer()
			muster, mpiexec := median(times[0]), median(times[1])
			b.ReportMetric(float64(muster.Microseconds())/1000, "muster-ms")
			b.ReportMetric(float64(mpiexec.Microseconds())/1000, "mpiexec-ms")
			b.ReportMetric(float64(muster)/float64(mpiexec), "muster/mpiexec")
			b.ReportMetric(0, "ns/op")
		})
	}
}
