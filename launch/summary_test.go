package launch

import (
	"bytes"
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestSummarySaysEachThingOnce(t *testing.T) {
	failure := func(ex *musterv1.WorkerExited, code int32, summary string) *musterv1.JobFinished {
		return &musterv1.JobFinished{State: musterv1.JobState_JOB_STATE_FAILED, ExitCode: code, Failure: ex, Summary: summary}
	}
	stopped := func(code int32, summary string) *musterv1.JobFinished {
		return &musterv1.JobFinished{State: musterv1.JobState_JOB_STATE_CANCELLED, ExitCode: code, Summary: summary}
	}
	tests := []struct {
		name string
		fin  *musterv1.JobFinished
		want string
	}{
		{"succeeded", &musterv1.JobFinished{State: musterv1.JobState_JOB_STATE_SUCCEEDED}, ""},
		{"exit code",
			failure(&musterv1.WorkerExited{Rank: 2, ExitCode: 3, StderrTail: []string{"boom"}}, 3, "rank 2 (node n1, local rank 2) exited with code 3"),
			"muster: job j-1 failed: rank 2 (node n1, local rank 2) exited with code 3\nmuster: last lines of rank 2's stderr:\n    boom\n"},
		{"signal",
			failure(&musterv1.WorkerExited{Rank: 1, Signal: 11}, 139, "rank 1 (node n1, local rank 1) was killed by signal 11 (SIGSEGV)"),
			"muster: job j-1 failed: rank 1 (node n1, local rank 1) was killed by signal 11 (SIGSEGV); exit code 139\n"},
		{"cannot start",
			failure(&musterv1.WorkerExited{ExitCode: 127, Error: "cannot start ./x.sh: no such file"}, 127, "rank 0 (node n1, local rank 0): cannot start ./x.sh: no such file"),
			"muster: job j-1 failed: rank 0 (node n1, local rank 0): cannot start ./x.sh: no such file; exit code 127\n"},
		{"SIGTERM", stopped(143, "stopped by SIGTERM"), "muster: job j-1 stopped by SIGTERM (exit code 143)\n"},
		{"Ctrl-C", stopped(130, "stopped by SIGINT"), "muster: job j-1 stopped by SIGINT (exit code 130)\n"},
		{"timeout", stopped(124, "timed out after 30s"), "muster: job j-1 timed out after 30s (exit code 124)\n"},
		{"launcher cancel", stopped(143, "cancelled by launcher cancel"), "muster: job j-1 cancelled by launcher cancel (exit code 143)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printSummary(&b, "j-1", tt.fin)
			if b.String() != tt.want {
				t.Fatalf("got  %q\nwant %q", b.String(), tt.want)
			}
			for _, twice := range []string{"(exit code 3)", "stopped: stopped", "terminated", "interrupt"} {
				if strings.Contains(b.String(), twice) {
					t.Fatalf("%q says a thing twice or in Go's words: %q", b.String(), twice)
				}
			}
		})
	}
}
