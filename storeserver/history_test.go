package storeserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/jobhistory"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// ListJobs takes the history's newest jobs, oldest first, within its
// bounds; GetJob reaches every job the history keeps.
func TestListJobsBoundsTheHistory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		jobs      int
		argBytes  int
		wantFirst int // the first job listed; the last is always jobs-1
	}{
		{"a few", 10, 10, 0},
		{"more than a list takes", 1500, 10, 500},
		{"large records", 100, 200 << 10, 80}, // the 20 newest fill 4 MiB
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := jobhistory.Open(jobhistory.Config{Dir: dir, MaxJobs: 2000})
			for i := range tc.jobs {
				h.Apply(&musterv1.HistoryCommand{Command: &musterv1.HistoryCommand_Finished{Finished: &musterv1.JobStatus{
					JobId: fmt.Sprintf("j-%04d", i), State: musterv1.JobState_JOB_STATE_SUCCEEDED,
					Spec:        &musterv1.JobSpec{Argv: [][]byte{[]byte(strings.Repeat("x", tc.argBytes))}},
					EndedUnixMs: time.Now().Add(time.Duration(i-tc.jobs) * time.Second).UnixMilli()}}})
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			s, err := storeserver.Start(context.Background(), storeserver.Config{Logger: zaptest.NewLogger(t), Listener: listen(t),
				Security: security.Security{Token: token}, History: jobhistory.Config{Dir: dir, MaxJobs: 2000}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			c, err := storeclient.Dial(s.Addr(), security.Security{Token: token})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			resp, err := c.ListJobs(ctx, &musterv1.ListJobsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			jobs := resp.GetJobs()
			if want := tc.jobs - tc.wantFirst; len(jobs) != want || jobs[0].JobId != fmt.Sprintf("j-%04d", tc.wantFirst) ||
				jobs[len(jobs)-1].JobId != fmt.Sprintf("j-%04d", tc.jobs-1) {
				t.Fatalf("%d jobs listed, %s to %s; want %d from j-%04d", len(jobs), jobs[0].JobId, jobs[len(jobs)-1].JobId, want, tc.wantFirst)
			}
			if _, err := c.GetJob(ctx, &musterv1.GetJobRequest{JobId: "j-0000"}); err != nil {
				t.Fatalf("the oldest job: %v", err)
			}
			// A watch begins with what a list shows.
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			watch, err := c.WatchJobs(wctx, &musterv1.WatchJobsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range jobs {
				got, err := watch.Recv()
				if err != nil || got.GetJobId() != want.GetJobId() {
					t.Fatalf("the watch's job %d: %s, %v; want %s", i, got.GetJobId(), err, want.GetJobId())
				}
			}
		})
	}
}
