package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// streams runs spec and returns each rank's stdout and stderr, byte for
// byte as the job's output events carried them.
func streams(t *testing.T, tc *agenttest.Cluster, spec *musterv1.JobSpec) map[int32][2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := tc.Client.Submit(ctx, &musterv1.SubmitRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	w, err := tc.Client.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: sub.JobId})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][2]string{}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("job stream ended before the job: %v", err)
		}
		if o := ev.GetOutput(); o != nil {
			s := out[o.Rank]
			s[o.Stream-musterv1.Stream_STREAM_STDOUT] += string(o.Data)
			out[o.Rank] = s
		}
		if f := ev.GetFinished(); f != nil {
			if f.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("job ended %v: %s", f.State, f.Summary)
			}
			return out
		}
	}
}

// ttyScript says whether stdout and stderr are terminals, the window size
// and TERM, then writes a colour and a last line without its newline.
const ttyScript = `test -t 1 && echo tty || echo pipe
test -t 2 && echo tty >&2 || echo pipe >&2
if test -t 1; then stty size <&1; fi
echo "TERM=${TERM-unset}"
printf '\033[1;31mred\033[0m\n'
printf 'bar 10%%\rbar 100%%'`

// --tty gives the ranks it names a pseudo-terminal, raw and of the
// launcher's size, with the launcher's TERM; the others keep pipes. The
// bytes the program wrote reach the job's events and --log-dir unchanged:
// no \r before \n, and the last line without its newline is not lost at
// the terminal's end (EIO).
func TestTTYGivesTheRanksItNamesATerminal(t *testing.T) {
	tmp := t.TempDir()
	tc := agenttest.NewCluster(t, 1, func(_ int, cfg *agent.Config) {
		cfg.TempDir = tmp
		cfg.Environ = append(cfg.Environ, "TERM=dumb")
	})
	logDir := filepath.Join(t.TempDir(), "logs")
	out := streams(t, tc, &musterv1.JobSpec{
		Argv: args("sh", "-c", ttyScript), Nnodes: 1, Nproc: 3, LogDir: []byte(logDir), InheritEnv: true,
		Tty: &musterv1.Terminal{Rows: 33, Cols: 97, Term: "xterm-256color", Stdout: true,
			Ranks: []*musterv1.RankSpan{{First: 0, Last: 0}, {First: 2, Last: 2}}},
	})
	const tail = "\x1b[1;31mred\x1b[0m\nbar 10%\rbar 100%"
	want := map[int32][2]string{
		0: {"tty\n33 97\nTERM=xterm-256color\n" + tail, "pipe\n"},
		1: {"pipe\nTERM=dumb\n" + tail, "pipe\n"},
		2: {"tty\n33 97\nTERM=xterm-256color\n" + tail, "pipe\n"},
	}
	for rank, w := range want {
		if out[rank] != w {
			t.Errorf("rank %d: stdout %q stderr %q, want %q and %q", rank, out[rank][0], out[rank][1], w[0], w[1])
		}
		files, _ := filepath.Glob(filepath.Join(logDir, "j-*", "rank-"+strconv.Itoa(int(rank))+".log"))
		if len(files) != 1 {
			t.Fatalf("rank %d: log files %v", rank, files)
		}
		if b, err := os.ReadFile(files[0]); err != nil || string(b) != w[0] {
			t.Errorf("%s: %q (%v), want %q", files[0], b, err, w[0])
		}
	}
}

// Without --tty, every stream is a pipe; with stderr asked for too, each
// stream is a terminal of its own (their lines stay on their stream), and a
// TERM the user gave with -x wins over the launcher's.
func TestTTYStreams(t *testing.T) {
	tc := agenttest.NewCluster(t, 1, nil)
	const tail = "\x1b[1;31mred\x1b[0m\nbar 10%\rbar 100%"
	out := streams(t, tc, &musterv1.JobSpec{Argv: args("sh", "-c", ttyScript), Nnodes: 1, Nproc: 1})
	if w := [2]string{"pipe\nTERM=unset\n" + tail, "pipe\n"}; out[0] != w {
		t.Errorf("no --tty: stdout %q stderr %q, want %q and %q", out[0][0], out[0][1], w[0], w[1])
	}
	out = streams(t, tc, &musterv1.JobSpec{Argv: args("sh", "-c", ttyScript), Nnodes: 1, Nproc: 1,
		Env: args("TERM=vt100"), Tty: &musterv1.Terminal{Rows: 5, Cols: 40, Term: "xterm", Stdout: true, Stderr: true}})
	if w := [2]string{"tty\n5 40\nTERM=vt100\n" + tail, "tty\n"}; out[0] != w {
		t.Errorf("--tty, stdout and stderr: stdout %q stderr %q, want %q and %q", out[0][0], out[0][1], w[0], w[1])
	}
}
