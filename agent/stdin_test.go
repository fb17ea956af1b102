package agent_test

import (
	"context"
	"encoding/hex"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// writeStdin sends r to job's stdin ranks as a launcher does, and returns
// once the store ends the stream or r ends.
func writeStdin(ctx context.Context, tc *agenttest.Cluster, job string, r io.Reader) error {
	stream, err := tc.Client.WriteStdin(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&musterv1.StdinChunk{JobId: job}); err != nil {
		_, err = stream.CloseAndRecv()
		return err
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := stream.Send(&musterv1.StdinChunk{Data: buf[:n]}); err != nil {
				_, err = stream.CloseAndRecv()
				return err
			}
		}
		if rerr != nil {
			_, err := stream.CloseAndRecv()
			return err
		}
	}
}

// followWithStdin runs spec with stdin and returns each rank's output and the
// job's end, once the stdin writer returned too.
func followWithStdin(t *testing.T, tc *agenttest.Cluster, spec *musterv1.JobSpec, stdin io.Reader) (map[int32][]string, *musterv1.JobFinished) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := tc.Client.Submit(ctx, &musterv1.SubmitRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	if spec.StdinRank != nil || spec.StdinAll {
		go func() { wrote <- writeStdin(ctx, tc, sub.JobId, stdin) }()
	} else {
		wrote <- nil // a launcher sends nothing when no rank reads
	}
	w, err := tc.Client.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: sub.JobId})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]string{}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("job stream ended before the job: %v", err)
		}
		if o := ev.GetOutput(); o != nil {
			out[o.Rank] = append(out[o.Rank], strings.Split(strings.TrimSuffix(string(o.Data), "\n"), "\n")...)
		}
		if f := ev.GetFinished(); f != nil {
			select {
			case err := <-wrote:
				if err != nil {
					t.Errorf("stdin writer: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("the stdin writer was still blocked after the job ended")
			}
			return out, f
		}
	}
}

// endless is a stdin that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

func TestStdinReachesItsRanks(t *testing.T) {
	rank := func(r int32) *int32 { return &r }
	const hello = "hello\n"
	tests := []struct {
		name  string
		rank  *int32
		all   bool
		stdin string
		want  map[int32]string // the stdin each rank reads
	}{
		{"rank 0", rank(0), false, hello, map[int32]string{0: hello}},
		{"a rank on the other node", rank(3), false, hello, map[int32]string{3: hello}},
		{"all", nil, true, hello, map[int32]string{0: hello, 1: hello, 2: hello, 3: hello}},
		{"none", nil, false, hello, nil},
		{"bytes as given", rank(1), false, "caf\xe9 \x00\r\n\n", map[int32]string{1: "caf\xe9 \x00\r\n\n"}},
	}
	tc := agenttest.NewCluster(t, 2, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, fin := followWithStdin(t, tc, &musterv1.JobSpec{
				// Each rank prints what it read, in hex; /dev/null reads as nothing.
				Argv:   args("sh", "-c", `echo "read $(od -An -tx1 | tr -d ' \n')"`),
				Nnodes: 2, Nproc: 2, StdinRank: tt.rank, StdinAll: tt.all,
			}, strings.NewReader(tt.stdin))
			if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("job ended %v: %s", fin.State, fin.Summary)
			}
			for r := int32(0); r < 4; r++ {
				if want := "read " + hex.EncodeToString([]byte(tt.want[r])); strings.Join(out[r], "|") != want {
					t.Errorf("rank %d printed %q, want %q", r, out[r], want)
				}
			}
		})
	}
}

func TestStdinIsStreamedWhole(t *testing.T) {
	t.Parallel()
	tc := agenttest.NewCluster(t, 2, nil)
	// 64 MiB, far more than the store, the agents or the pipes hold, to
	// every rank of two nodes.
	const size = 64 << 20
	out, fin := followWithStdin(t, tc, &musterv1.JobSpec{
		Argv: args("sh", "-c", "wc -c"), Nnodes: 2, Nproc: 2, StdinAll: true,
	}, io.LimitReader(endless{}, size))
	if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %v: %s", fin.State, fin.Summary)
	}
	var got []string
	for r := int32(0); r < 4; r++ {
		got = append(got, strings.TrimSpace(strings.Join(out[r], "")))
	}
	for r, n := range got {
		if n != "67108864" {
			t.Errorf("rank %d read %s bytes, want %d", r, n, size)
		}
	}
}

func TestWorkerThatNeverReadsStdinDoesNotHoldTheJob(t *testing.T) {
	t.Parallel()
	tc := agenttest.NewCluster(t, 1, nil)
	tests := []struct {
		name   string
		script string
		state  musterv1.JobState
		lines  int
	}{
		// An endless stdin and workers that never read it: the output
		// arrives, the job ends, and the launcher's writer is let go.
		{"exits 0", `i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); done`, musterv1.JobState_JOB_STATE_SUCCEEDED, 200},
		{"fails", `echo one; exit 4`, musterv1.JobState_JOB_STATE_FAILED, 1},
		// Reads a little, then stops reading but keeps running a while.
		{"stops reading", `head -c 10 >/dev/null; echo read; sleep 0.5`, musterv1.JobState_JOB_STATE_SUCCEEDED, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, fin := followWithStdin(t, tc, &musterv1.JobSpec{
				Argv: args("sh", "-c", tt.script), Nnodes: 1, Nproc: 2, StdinAll: true,
			}, endless{})
			if fin.State != tt.state {
				t.Fatalf("job ended %v: %s", fin.State, fin.Summary)
			}
			var counts []int
			for r := int32(0); r < 2; r++ {
				counts = append(counts, len(out[r]))
			}
			sort.Ints(counts)
			if tt.state == musterv1.JobState_JOB_STATE_SUCCEEDED && (counts[0] != tt.lines || counts[1] != tt.lines) {
				t.Fatalf("lines per rank %v, want %d each", counts, tt.lines)
			}
		})
	}
}
