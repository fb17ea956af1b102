package bench

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Progress bars: 2 ranks each draw a tqdm-style bar 800 times with \r, 5 ms
// apart, on one terminal (a real pty) and into a pipe; the bytes the
// launcher sends are counted. MUSTER_BENCH_LAUNCHER runs another build of
// the launcher (an older one, to compare).
const barScript = `i=0; while [ $i -lt 800 ]; do i=$((i+1)); printf '\rtrain: %3d%%|########################################| %d/800' $((i/8)) $i; sleep 0.005; done; echo`

// openPTY opens a pseudo-terminal: its master, and its slave for a child.
func openPTY(b *testing.B) (master, slave *os.File) {
	b.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		b.Skipf("no pty: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		b.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		b.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		b.Fatal(err)
	}
	// Raw output: the terminal driver adds no \r to the launcher's \n.
	t, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err == nil {
		t.Oflag &^= unix.OPOST
		unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, t)
	}
	return m, s
}

func BenchmarkProgressBars(b *testing.B) {
	launcher := os.Getenv("MUSTER_BENCH_LAUNCHER")
	if launcher == "" {
		launcher = buildLauncher(b)
	}
	argv := []string{"run", "--embedded", "--nproc", "2", "--", "sh", "-c", barScript}
	for i := 0; i < b.N; i++ {
		master, slave := openPTY(b)
		cmd := exec.Command(launcher, argv...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, slave, os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		slave.Close()
		// The master reads until every holder of the slave has closed it (EIO).
		n, _ := io.Copy(io.Discard, master)
		master.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n), "terminal-bytes")

		var pipe bytes.Buffer
		cmd = exec.Command(launcher, argv...)
		cmd.Stdout, cmd.Stderr = &pipe, os.Stderr
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(pipe.Len()), "pipe-bytes")
	}
}
