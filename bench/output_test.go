package bench

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
)

// Output memory: 256 workers print 100,000 lines each while the reader of
// the output stalls for 10 s, then reads everything.
const (
	memWorkers = 256
	memLines   = 100_000
	memStall   = 10 * time.Second
)

func buildAgent(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/agent").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// stalled runs argv with its stdout read only after memStall, counts the
// lines and returns the peak resident memory of argv's process tree's
// largest member and how long the whole took.
func stalled(b *testing.B, argv []string, env []string) (lines int, peak int64, took time.Duration) {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(memStall)
	br := bufio.NewReaderSize(out, 1<<20)
	for {
		_, err := br.ReadSlice('\n')
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			b.Fatal(err)
		}
		if err == nil {
			lines++
		}
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%v: %v\n%s", argv[:3], err, errb.String())
	}
	return lines, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024, time.Since(start)
}

// vmHWM is a live process's peak resident memory.
func vmHWM(b *testing.B, pid int) int64 {
	b.Helper()
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// BenchmarkOutputMemory measures peak memory with a stalled reader: the
// embedded default (launcher, store and agent in one process), the agent
// daemon and its launcher apart, and mpirun with the same job when it is
// installed. Every line must arrive.
func BenchmarkOutputMemory(b *testing.B) {
	launcher, agent := buildLauncher(b), buildAgent(b)
	job := []string{"--", "seq", "1", strconv.Itoa(memLines)}
	want := memWorkers * memLines
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	for i := 0; i < b.N; i++ {
		n, peak, took := stalled(b, append([]string{launcher, "run", "--embedded", "--nproc", strconv.Itoa(memWorkers)}, job...), nil)
		if n != want {
			b.Fatalf("embedded: %d lines, want %d", n, want)
		}
		b.ReportMetric(mib(peak), "embedded-peak-MiB")
		b.ReportMetric(took.Seconds(), "embedded-s")

		dir := b.TempDir()
		addr := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(b))
		ag := exec.Command(agent, "--listen", addr, "--socket", filepath.Join(dir, "agent.sock"), "--token-file", filepath.Join(dir, "token"),
			"--rank-logs", filepath.Join(dir, "rank-logs"))
		if err := ag.Start(); err != nil {
			b.Fatal(err)
		}
		env := []string{"MUSTER_TOKEN_FILE=" + filepath.Join(dir, "token")}
		for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
			c := exec.Command(launcher, "run", "--cluster", addr, "--", "true")
			c.Env = append(os.Environ(), env...)
			if c.Run() == nil {
				break
			}
			if time.Since(start) > 20*time.Second {
				b.Fatal("agent never became ready")
			}
		}
		n, lpeak, took := stalled(b, append([]string{launcher, "run", "--cluster", addr, "--nproc", strconv.Itoa(memWorkers)}, job...), env)
		apeak := vmHWM(b, ag.Process.Pid)
		ag.Process.Signal(syscall.SIGTERM)
		ag.Wait()
		if n != want {
			b.Fatalf("cluster: %d lines, want %d", n, want)
		}
		b.ReportMetric(mib(apeak), "agent-peak-MiB")
		b.ReportMetric(mib(lpeak), "launcher-peak-MiB")
		b.ReportMetric(took.Seconds(), "cluster-s")

		if _, err := exec.LookPath("mpirun"); err == nil {
			n, mpeak, took := stalled(b, append([]string{"mpirun", "--allow-run-as-root", "--oversubscribe", "-n", strconv.Itoa(memWorkers)}, job[1:]...),
				[]string{"OMPI_MCA_plm_rsh_agent="})
			if n != want {
				b.Fatalf("mpirun: %d lines, want %d", n, want)
			}
			b.ReportMetric(mib(mpeak), "mpirun-peak-MiB")
			b.ReportMetric(took.Seconds(), "mpirun-s")
			b.ReportMetric(float64(peak)/float64(mpeak), "embedded/mpirun-peak")
		}
	}
	b.ReportMetric(0, "ns/op")
}
