package agent_test

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ranklog"
)

// readLogs returns a job's kept output as "rank stream data" lines, sorted,
// and the notes about nodes.
func readLogs(t *testing.T, tc *agenttest.Cluster, req *musterv1.LogsRequest) (lines, notes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := tc.Client.Logs(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			for _, l := range strings.SplitAfter(string(r.GetData()), "\n") {
				if l != "" {
					lines = append(lines, fmt.Sprintf("%d %v %q", r.GetRank(), r.GetStream(), l))
				}
			}
		}
		if resp.GetNote() != "" {
			notes = append(notes, resp.GetNode()+": "+resp.GetNote())
		}
	}
	sort.Strings(lines)
	return lines, notes
}

// Each node keeps its ranks' output; a node that went away is named, and
// the others' ranks still come.
func TestKeptOutput(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, func(_ int, cfg *agent.Config) {
		cfg.RankLogs = ranklog.Config{Dir: t.TempDir()}
	})
	_, fin := follow(t, tc, &musterv1.JobSpec{Argv: args("sh", "-c", `echo "o$RANK"; echo "e$RANK" >&2`), Nnodes: 2, Nproc: 2})
	if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job: %v %s", fin.State, fin.Summary)
	}
	jobs, err := tc.Client.ListJobs(context.Background(), &musterv1.ListJobsRequest{})
	if err != nil || len(jobs.Jobs) != 1 {
		t.Fatalf("jobs: %v %v", jobs, err)
	}
	job := jobs.Jobs[0].JobId
	var want []string
	for rank := range 4 {
		want = append(want, fmt.Sprintf("%d STREAM_STDOUT %q", rank, fmt.Sprintf("o%d\n", rank)),
			fmt.Sprintf("%d STREAM_STDERR %q", rank, fmt.Sprintf("e%d\n", rank)))
	}
	sort.Strings(want)
	if lines, notes := readLogs(t, tc, &musterv1.LogsRequest{JobId: job}); strings.Join(lines, "|") != strings.Join(want, "|") || len(notes) != 0 {
		t.Fatalf("logs: %v, notes %v; want %v", lines, notes, want)
	}
	tc.Agents[1].Close(0)
	lines, notes := readLogs(t, tc, &musterv1.LogsRequest{JobId: job})
	if strings.Join(lines, "|") != strings.Join(want[:4], "|") || len(notes) != 1 || !strings.Contains(notes[0], "not connected") {
		t.Fatalf("with node 1 gone: %v, notes %v", lines, notes)
	}
}
