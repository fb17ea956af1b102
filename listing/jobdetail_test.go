package listing

import (
	"bytes"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestWriteJobDetail(t *testing.T) {
	at := time.Date(2026, 11, 25, 16, 0, 0, 0, time.UTC).UnixMilli()
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("python"), []byte("train.py")}, Nnodes: 2, Nproc: 8, Gpus: 8, MaxRestarts: 1}
	for _, tc := range []struct {
		name string
		job  *musterv1.JobStatus
		want []string // whole lines, spaces squeezed
	}{
		{"a failed job", &musterv1.JobStatus{JobId: "j-1", Spec: spec, State: musterv1.JobState_JOB_STATE_FAILED, ExitCode: 3,
			Owner: &musterv1.Identity{Uid: 1000, User: "ada"}, Summary: "rank 9 (node b, local rank 1) exited with code 3",
			SubmittedUnixMs: at, StartedUnixMs: at + 1000, EndedUnixMs: at + 60_000, Rounds: 2, Restarts: 1,
			RoundNodes: []*musterv1.JobRound{{Number: 0, Nodes: []string{"a", "b"}, StartedUnixMs: at + 1000},
				{Number: 1, Nodes: []string{"a", "c"}, StartedUnixMs: at + 30_000}},
			Failure: &musterv1.WorkerExited{Rank: 9, Node: "c", ExitCode: 3, StderrTail: []string{"Traceback", "ValueError: x"}}},
			[]string{"job: j-1", "state: failed", "exit code: 3", "summary: rank 9 (node b, local rank 1) exited with code 3",
				"user: ada", "command: python train.py", "spec: 2 node(s), 8 worker(s) a node, 8 GPU(s) a node, 1 restart(s) allowed",
				"submitted: 2026-11-25T16:00:00Z", "started: 2026-11-25T16:00:01Z", "ended: 2026-11-25T16:01:00Z",
				"rounds: 2 (1 restart(s))", "round 0: a,b, started 2026-11-25T16:00:01Z", "round 1: a,c, started 2026-11-25T16:00:30Z",
				"failed rank: 9 on c", "stderr: Traceback", "stderr: ValueError: x"}},
		{"a pending job of the operator", &musterv1.JobStatus{JobId: "j-2", Spec: spec, State: musterv1.JobState_JOB_STATE_PENDING, Rounds: 1},
			[]string{"state: pending", "exit code: -", "summary: -", "user: (operator)", "started: -", "ended: -", "nodes: -"}},
		{"a trimmed record", &musterv1.JobStatus{JobId: "j-3", State: musterv1.JobState_JOB_STATE_SUCCEEDED, Trimmed: true, EndedUnixMs: at},
			[]string{"exit code: 0", "note: the history shortened this job's record to its bound (host lists, older rounds, nodes or command left out)"}},
		{"a running job's workers", &musterv1.JobStatus{JobId: "j-4", Spec: spec, State: musterv1.JobState_JOB_STATE_RUNNING, WorkersLeftOut: 6,
			Workers: []*musterv1.WorkerStarted{{Rank: 0, Node: "a", Pid: 41, Binding: &musterv1.WorkerBinding{Gpus: []int32{0}, NumaNodes: []int32{0},
				Cpus: "0-13", Applied: true, Mode: "cores", Threads: 14, MemoryNodes: []int32{0}}}, {Rank: 1, LocalRank: 1, Node: "a", Pid: 42}}},
			[]string{"worker: rank 0 (node a, local rank 0): GPUs 0, NUMA node 0, CPUs 0-13 (bound: cores, 14 core(s)), memory on NUMA node 0, no NIC near, pid 41",
				"worker: rank 1 (node a, local rank 1): no GPUs, binding unknown, pid 42", "workers: 6 more not shown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := WriteJobDetail(&out, tc.job); err != nil {
				t.Fatal(err)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(out.String(), "\n") {
				lines[strings.Join(strings.Fields(l), " ")] = true
			}
			for _, want := range tc.want {
				if !lines[want] {
					t.Errorf("no line %q in:\n%s", want, out.String())
				}
			}
		})
	}
}
