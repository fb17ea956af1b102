package bench

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkHangStop measures how long after --hang-timeout D a job with a
// hung rank ends: four Python workers beat every 50 ms; rank 1 prints the
// time of its last heartbeat and stops. The time from that heartbeat to the
// launcher's exit, less D, is what muster adds to D: the watch's tick, the
// dumps (Python's stacks; with fr-pipe, a flight recorder written through
// PyTorch's dump pipe, as ProcessGroupNCCL answers it), and the stop.
// Python's start is left to --hang-first-timeout (60 s): on a loaded machine
// it takes longer than a short D. MUSTER_HANG_TIMEOUTS=1s,10s picks the
// timeouts.
func BenchmarkHangStop(b *testing.B) {
	python, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 not found")
	}
	launcher := buildLauncher(b)
	timeouts := []string{"1s", "5s"}
	if v := os.Getenv("MUSTER_HANG_TIMEOUTS"); v != "" {
		timeouts = strings.Split(v, ",")
	}
	lastBeat := regexp.MustCompile(`\[1\] last-beat (\d+)`)
	for _, d := range timeouts {
		timeout, err := time.ParseDuration(d)
		if err != nil {
			b.Fatal(err)
		}
		for _, fr := range []string{"0", "1"} {
			name := "timeout=" + d
			if fr == "1" {
				name += "/fr-pipe"
			}
			b.Run(name, func(b *testing.B) {
				var over []float64
				for i := 0; i < b.N; i++ {
					cmd := exec.Command(launcher, "run", "--embedded", "--nproc", "4", "--hang-timeout", d, "--hang-first-timeout", "60s", "--kill-timeout", "2s",
						"--log-dir", b.TempDir(), "-x", "FR_PIPE="+fr, "--", python, "testdata/hang.py")
					var out, errb bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &errb
					err := cmd.Run()
					end := time.Now()
					m := lastBeat.FindStringSubmatch(out.String())
					if err == nil || m == nil || !strings.Contains(errb.String(), "rank 1 (node") {
						b.Fatalf("%v; stdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
					}
					ns, _ := strconv.ParseInt(m[1], 10, 64)
					over = append(over, float64(end.Sub(time.Unix(0, ns))-timeout)/float64(time.Millisecond))
				}
				b.ReportMetric(medianOf(over), "after-D-ms")
				b.ReportMetric(maxOf(over), "max-after-D-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
