// Package bench measures muster against its peers. Each benchmark runs the
// commands it compares in turn within one run and reports their ratios, so
// that a noisy machine slows all of them alike.
package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func buildLauncher(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "launcher")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/launcher").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// timed runs argv to completion and returns its wall time and peak resident
// memory in bytes.
func timed(b *testing.B, argv []string) (time.Duration, int64) {
	cmd := exec.Command(argv[0], argv[1:]...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %v\n%s", argv, err, out)
	}
	d := time.Since(start)
	return d, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
}

// BenchmarkLaunch starts four workers that do nothing: muster's embedded
// default against mpirun and against the bare command.
func BenchmarkLaunch(b *testing.B) {
	launcher := buildLauncher(b)
	cmds := []struct {
		name string
		argv []string
	}{
		{"muster", []string{launcher, "run", "--embedded", "--nproc", "4", "--", "true"}},
		{"mpirun", []string{"mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4", "true"}},
		{"true", []string{"true"}},
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		b.Skip("mpirun not installed (Debian: apt-get install openmpi-bin)")
	}
	os.Setenv("OMPI_MCA_plm_rsh_agent", "") // single node: no ssh
	for _, c := range cmds {                // warm caches once
		timed(b, c.argv)
	}
	total := make([]time.Duration, len(cmds))
	peak := make([]int64, len(cmds))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, c := range cmds {
			d, rss := timed(b, c.argv)
			total[j] += d
			peak[j] = max(peak[j], rss)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(total[0].Microseconds())/n/1000, "muster-ms")
	b.ReportMetric(float64(total[1].Microseconds())/n/1000, "mpirun-ms")
	b.ReportMetric(float64(total[2].Microseconds())/n/1000, "true-ms")
	b.ReportMetric(float64(total[0])/float64(total[1]), "muster/mpirun")
	b.ReportMetric(float64(total[0])/float64(total[2]), "muster/true")
	b.ReportMetric(float64(peak[0])/(1<<20), "muster-peak-MiB")
	b.ReportMetric(float64(peak[1])/(1<<20), "mpirun-peak-MiB")
	b.ReportMetric(0, "ns/op")
}
