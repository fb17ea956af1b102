// Package bench measures muster against its peers. Each benchmark runs the
// commands it compares in turn within one run and reports their ratios, so
// that a noisy machine slows all of them alike.
package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// BenchmarkLaunch starts 1, 4 and 16 workers that do nothing: muster's
// embedded default against mpirun and against the bare command, in turn
// within each iteration. It reports medians, and the median of each
// iteration's muster/mpirun ratio, which a noisy machine moves least.
func BenchmarkLaunch(b *testing.B) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		b.Skip("mpirun not installed (Debian: apt-get install openmpi-bin)")
	}
	launcher := buildLauncher(b)
	os.Setenv("OMPI_MCA_plm_rsh_agent", "") // single node: no ssh
	for _, n := range []string{"1", "4", "16"} {
		b.Run("workers="+n, func(b *testing.B) {
			cmds := [][]string{
				{launcher, "run", "--embedded", "--nproc", n, "--", "true"},
				{"mpirun", "--allow-run-as-root", "--oversubscribe", "-n", n, "true"},
				{"true"},
			}
			for _, argv := range cmds { // warm caches once
				timed(b, argv)
			}
			walls := make([][]float64, len(cmds))
			var ratios []float64
			peak := make([]int64, len(cmds))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, argv := range cmds {
					d, rss := timed(b, argv)
					walls[j] = append(walls[j], float64(d.Microseconds())/1000)
					peak[j] = max(peak[j], rss)
				}
				ratios = append(ratios, walls[0][i]/walls[1][i])
			}
			b.StopTimer()
			b.ReportMetric(medianOf(walls[0]), "muster-ms")
			b.ReportMetric(medianOf(walls[1]), "mpirun-ms")
			b.ReportMetric(medianOf(walls[2]), "true-ms")
			b.ReportMetric(medianOf(ratios), "muster/mpirun")
			b.ReportMetric(float64(peak[0])/(1<<20), "muster-peak-MiB")
			b.ReportMetric(float64(peak[1])/(1<<20), "mpirun-peak-MiB")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
