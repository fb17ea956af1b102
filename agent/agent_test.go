package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	"github.com/musterhq/muster/gpu"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testwait"
)

// args is a command as a JobSpec holds it.
func args(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// follow submits spec and gathers the job's output lines by rank and its end.
func follow(t *testing.T, tc *agenttest.Cluster, spec *musterv1.JobSpec) (map[int32][]string, *musterv1.JobFinished) {
	t.Helper()
	return followWithStdin(t, tc, spec, strings.NewReader(""))
}

func TestTwoNodeJob(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, func(i int, cfg *agent.Config) {
		cfg.GPUs, _ = gpu.Parse("0,1,2,3")
	})
	out, fin := follow(t, tc, &musterv1.JobSpec{
		Argv:   args("sh", "-c", `echo "$RANK $GROUP_RANK $MASTER_ADDR $CUDA_VISIBLE_DEVICES $MUSTER_LOCAL_GPUS ${NCCL_COMM_ID:-none} $MUSTER_NODE_ADDRS"`),
		Nnodes: 2, Gpus: 2, KillTimeoutMs: 1000,
	})
	if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %v: %s", fin.State, fin.Summary)
	}
	var got []string
	for _, lines := range out {
		got = append(got, lines...)
	}
	sort.Strings(got)
	// The NCCL root and the master both live on node rank 0 (node-0, 127.0.0.2).
	for i, prefix := range []string{
		"0 0 127.0.0.2 0,1 0 127.0.0.2:",
		"1 0 127.0.0.2 0,1 1 none 127.0.0.2 127.0.0.3",
		"2 1 127.0.0.2 0,1 0 none 127.0.0.2 127.0.0.3",
		"3 1 127.0.0.2 0,1 1 none 127.0.0.2 127.0.0.3",
	} {
		if i >= len(got) || !strings.HasPrefix(got[i], prefix) {
			t.Fatalf("worker lines:\n%s\nwant line %d to start %q", strings.Join(got, "\n"), i, prefix)
		}
	}
}

func TestFailureOnOneNodeStopsTheOther(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, nil)
	dir := t.TempDir()
	_, fin := follow(t, tc, &musterv1.JobSpec{
		// Rank 3 fails once everyone started; the rest would sleep forever.
		Argv:   args("sh", "-c", fmt.Sprintf(`touch %s/$RANK; if [ "$RANK" = 3 ]; then while [ $(ls %s | wc -l) -lt 4 ]; do sleep 0.01; done; echo bad input >&2; exit 5; fi; exec sleep 1000`, dir, dir)),
		Nnodes: 2, Nproc: 2, KillTimeoutMs: 5000,
	})
	if fin.State != musterv1.JobState_JOB_STATE_FAILED || fin.ExitCode != 5 {
		t.Fatalf("job ended %v with %d: %s", fin.State, fin.ExitCode, fin.Summary)
	}
	f := fin.Failure
	if f.Rank != 3 || f.Node != "node-1" || len(f.StderrTail) != 1 || f.StderrTail[0] != "bad input" {
		t.Fatalf("failure: %+v", f)
	}
}

func TestLogDirAndHostfile(t *testing.T) {
	tmp := t.TempDir()
	tc := agenttest.NewCluster(t, 1, func(_ int, cfg *agent.Config) { cfg.TempDir = tmp })
	logDir := filepath.Join(t.TempDir(), "logs")
	_, fin := follow(t, tc, &musterv1.JobSpec{
		Argv: args("sh", "-c", `cat "$MUSTER_HOSTFILE"; echo "to stderr" >&2`), Nnodes: 1, Nproc: 2, LogDir: []byte(logDir),
	})
	if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job: %v %s", fin.State, fin.Summary)
	}
	for rank := 0; rank < 2; rank++ {
		// Each job's logs have a directory of their own, a file per stream.
		for name, want := range map[string]string{"rank-%d.log": "127.0.0.2 slots=2\n", "rank-%d.err.log": "to stderr\n"} {
			files, _ := filepath.Glob(filepath.Join(logDir, "j-*", fmt.Sprintf(name, rank)))
			if len(files) != 1 {
				t.Fatalf("rank %d: log files %v", rank, files)
			}
			if b, err := os.ReadFile(files[0]); err != nil || string(b) != want {
				t.Errorf("%s: %q (%v), want %q", files[0], b, err, want)
			}
		}
	}
	// The job's own files go with it, once its last worker was reported.
	jobFiles := func() []string { m, _ := filepath.Glob(filepath.Join(tmp, "muster-*")); return m }
	testwait.UntilShowing(t, 10*time.Second, "the job's files to go", func() bool { return len(jobFiles()) == 0 },
		func() string { return fmt.Sprint(jobFiles()) })
}

// fakeXIDs stands in for NVML's XID events, which need a GPU.
type fakeXIDs chan gpu.XIDEvent

func (f fakeXIDs) Next(ctx context.Context) (gpu.XIDEvent, error) {
	select {
	case ev := <-f:
		return ev, nil
	case <-ctx.Done():
		return gpu.XIDEvent{}, ctx.Err()
	}
}

func (f fakeXIDs) Close() {}

// A worker that fails after an XID error of its own GPU is reported so,
// with the GPU and the code; an error of a GPU that is not its own is not
// laid at its door.
func TestXIDErrorNamesTheWorkersGPU(t *testing.T) {
	t.Parallel()
	xids := make(fakeXIDs, 2)
	tc := agenttest.NewCluster(t, 1, func(i int, cfg *agent.Config) {
		cfg.GPUs, _ = gpu.Parse("0,1,2,3")
		cfg.XIDs = xids
	})
	dir := t.TempDir()
	go func() {
		// Once every worker runs: an XID error of GPU 0, then of GPU 2,
		// whose worker then fails as CUDA would make it.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if m, _ := filepath.Glob(filepath.Join(dir, "up-*")); len(m) == 4 {
				xids <- gpu.XIDEvent{GPU: 0, XID: 13, At: time.Now()}
				xids <- gpu.XIDEvent{GPU: 2, XID: 79, At: time.Now()}
				os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, fin := follow(t, tc, &musterv1.JobSpec{
		Argv: args("sh", "-c", fmt.Sprintf(`touch %s/up-$RANK; [ "$RANK" = 2 ] || exec sleep 1000
while [ ! -e %s/go ]; do sleep 0.01; done; sleep 0.2; exit 1`, dir, dir)),
		Nnodes: 1, Gpus: 4, Nproc: 4, KillTimeoutMs: 1000,
	})
	f := fin.GetFailure()
	if fin.State != musterv1.JobState_JOB_STATE_FAILED || f.GetRank() != 2 || f.GetCause() != musterv1.ExitCause_EXIT_CAUSE_GPU_XID ||
		f.GetGpu() != 2 || f.GetXid() != 79 || !strings.Contains(fin.Summary, "after GPU 2 reported XID 79 (GPU has fallen off the bus)") {
		t.Fatalf("job ended %v: %s; failure %v", fin.State, fin.Summary, f)
	}
}
