package failure_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestFailedAndExitCode(t *testing.T) {
	tests := []struct {
		name   string
		ex     *musterv1.WorkerExited
		failed bool
		code   int32
	}{
		{"exited 0", &musterv1.WorkerExited{}, false, 0},
		{"exited 3", &musterv1.WorkerExited{ExitCode: 3}, true, 3},
		{"killed by SIGKILL", &musterv1.WorkerExited{Signal: 9}, true, 137},
		{"could not start", &musterv1.WorkerExited{Error: "exec: no such file"}, true, 1},
		{"stopped by muster", &musterv1.WorkerExited{Signal: 15, Stopped: true}, false, 143},
		{"stopped, exited 1", &musterv1.WorkerExited{ExitCode: 1, Stopped: true}, false, 1},
		{"hung, aborted", &musterv1.WorkerExited{Signal: 6, Hang: &musterv1.WorkerHang{SilentMs: 1000}}, true, 134},
		{"hung, then stopped", &musterv1.WorkerExited{Signal: 15, Stopped: true, Hang: &musterv1.WorkerHang{}}, true, 143},
		{"hung, exited 0", &musterv1.WorkerExited{Hang: &musterv1.WorkerHang{}}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.Failed(tt.ex); got != tt.failed {
				t.Errorf("Failed = %v, want %v", got, tt.failed)
			}
			if got := failure.ExitCode(tt.ex); got != tt.code {
				t.Errorf("ExitCode = %d, want %d", got, tt.code)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name string
		mpi  string
		ex   *musterv1.WorkerExited
		want string
	}{
		{"exit code", "", &musterv1.WorkerExited{Rank: 5, Node: "b", LocalRank: 1, ExitCode: 2},
			"rank 5 (node b, local rank 1) exited with code 2"},
		{"a Python exception by @record", "", &musterv1.WorkerExited{Rank: 1, Node: "a", LocalRank: 1, ExitCode: 1, PythonError: &musterv1.PythonError{
			Type: "ValueError", Message: "bad batch", Frames: []string{`File "train.py", line 9, in main: step()`, `File "train.py", line 3, in step: raise ValueError("bad batch")`}}},
			`rank 1 (node a, local rank 1) exited with code 1: ValueError: bad batch, raised at File "train.py", line 3, in step: raise ValueError("bad batch")`},
		{"an exception without a message or frames", "", &musterv1.WorkerExited{Rank: 0, Node: "a", ExitCode: 1, PythonError: &musterv1.PythonError{Type: "KeyboardInterrupt"}},
			"rank 0 (node a, local rank 0) exited with code 1: KeyboardInterrupt"},
		{"signal", "", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 9},
			"rank 0 (node a, local rank 0) was killed by signal 9 (SIGKILL)"},
		{"error", "", &musterv1.WorkerExited{Rank: 2, Node: "a", LocalRank: 2, Error: "called MPI_Abort with exit code 7"},
			"rank 2 (node a, local rank 2): called MPI_Abort with exit code 7"},
		{"OOM killer, with a limit", "", &musterv1.WorkerExited{Rank: 3, Node: "b", LocalRank: 1, Signal: 9,
			Cause: musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED, MemoryLimitBytes: 512 << 20},
			"rank 3 (node b, local rank 1) was killed by the kernel's OOM killer (memory limit 512 MiB of its cgroup)"},
		{"OOM killer, no limit", "", &musterv1.WorkerExited{Rank: 3, Node: "b", Signal: 9, Cause: musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED},
			"rank 3 (node b, local rank 0) was killed by the kernel's OOM killer"},
		{"OOM killer took a child", "", &musterv1.WorkerExited{Rank: 1, Node: "a", LocalRank: 1, ExitCode: 1,
			Cause: musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED, MemoryLimitBytes: 3 << 29},
			"rank 1 (node a, local rank 1) exited with code 1 after the kernel's OOM killer killed one of its processes (memory limit 1.5 GiB of its cgroup)"},
		{"XID", "", &musterv1.WorkerExited{Rank: 7, Node: "c", LocalRank: 7, ExitCode: 1,
			Cause: musterv1.ExitCause_EXIT_CAUSE_GPU_XID, Gpu: 7, Xid: 79},
			"rank 7 (node c, local rank 7) exited with code 1 after GPU 7 reported XID 79 (GPU has fallen off the bus)"},
		{"XID without a name", "", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 6, Cause: musterv1.ExitCause_EXIT_CAUSE_GPU_XID, Xid: 999},
			"rank 0 (node a, local rank 0) was killed by signal 6 (SIGABRT) after GPU 0 reported XID 999"},
		{"CPU limit", "", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 24, Cause: musterv1.ExitCause_EXIT_CAUSE_RLIMIT_CPU},
			"rank 0 (node a, local rank 0) was killed by signal 24 (SIGXCPU): it used up its CPU time limit (ulimit -t)"},
		{"file size limit", "", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 25, Cause: musterv1.ExitCause_EXIT_CAUSE_RLIMIT_FSIZE},
			"rank 0 (node a, local rank 0) was killed by signal 25 (SIGXFSZ): it wrote past its file size limit (ulimit -f)"},
		{"pids limit", "", &musterv1.WorkerExited{Rank: 0, Node: "a", ExitCode: 1, Cause: musterv1.ExitCause_EXIT_CAUSE_CGROUP_PIDS},
			"rank 0 (node a, local rank 0) exited with code 1 after its cgroup refused a fork at its limit of processes (pids.max)"},
		{"Open MPI's mpirun", "openmpi", &musterv1.WorkerExited{Rank: 0, Node: "a", ExitCode: 1},
			"mpirun (node a) exited with code 1"},
		{"Open MPI's daemon", "openmpi", &musterv1.WorkerExited{Rank: 3, Node: "c", Signal: 15},
			"the Open MPI daemon on node c was killed by signal 15 (SIGTERM)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.Describe(&musterv1.JobSpec{Mpi: tt.mpi}, tt.ex); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDescribeLoss(t *testing.T) {
	tests := []struct {
		name string
		loss *musterv1.NodeLoss
		want string
	}{
		{"gossip, by the store", failure.Loss("b", musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, "", 5230*time.Millisecond, ""),
			"node b lost: no gossip ack for 5.2 s"},
		{"gossip, seen by a peer", failure.Loss("b", musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, "a", 1200*time.Millisecond, ""),
			"node b lost: no gossip ack for 1.2 s (seen by node a)"},
		{"agent gone", failure.Loss("n3", musterv1.LossSignal_LOSS_SIGNAL_AGENT_GONE, "", 0, ""),
			"node n3 lost: agent connection closed"},
		{"session expired", failure.Loss("a", musterv1.LossSignal_LOSS_SIGNAL_SESSION_EXPIRED, "", 10*time.Second, "watch stream ended"),
			"node a lost: watch stream ended, and its agent did not come back within 10s"},
		{"not back after the store's restart", failure.Loss("(node rank 1)", musterv1.LossSignal_LOSS_SIGNAL_NOT_BACK, "", 10*time.Second, ""),
			"node (node rank 1) lost: its agent did not register within 10s of the store's restart"},
		{"unread commands", failure.Loss("c", musterv1.LossSignal_LOSS_SIGNAL_UNREAD_COMMANDS, "", 0, "4096 commands"),
			"node c lost: it left the store's commands unread (4096 commands)"},
		{"an observer that is the node itself is not named", failure.Loss("a", musterv1.LossSignal_LOSS_SIGNAL_LEFT, "a", 0, ""),
			"node a lost: it left the cluster"},
		{"the store cut off", func() *musterv1.NodeLoss {
			l := failure.Loss("node4", musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, "", 16*time.Second, "")
			l.StoreCutOff = true
			return l
		}(), "node node4 lost the store, which had lost contact with many of its nodes at once (most likely the store's own node was cut off): no gossip ack for 16.0 s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.DescribeLoss(tt.loss); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExplain(t *testing.T) {
	oom := failure.Facts{OOMKills: 1, MemoryLimit: 64 << 20}
	xid := failure.Facts{XIDs: []failure.XID{{GPU: 2, Code: 79}, {GPU: 3, Code: 48}}}
	tests := []struct {
		name  string
		ex    *musterv1.WorkerExited
		facts failure.Facts
		cause musterv1.ExitCause
		limit int64
		gpu   int32
		xid   int32
	}{
		{"SIGKILL with an OOM kill", &musterv1.WorkerExited{Signal: 9}, oom, musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED, 64 << 20, 0, 0},
		{"SIGKILL alone", &musterv1.WorkerExited{Signal: 9}, failure.Facts{}, musterv1.ExitCause_EXIT_CAUSE_UNSPECIFIED, 0, 0, 0},
		{"exit 1 after a child's OOM kill", &musterv1.WorkerExited{ExitCode: 1}, oom, musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED, 64 << 20, 0, 0},
		{"OOM before XID", &musterv1.WorkerExited{Signal: 9}, failure.Facts{OOMKills: 2, XIDs: xid.XIDs}, musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED, 0, 0, 0},
		{"the first XID", &musterv1.WorkerExited{ExitCode: 1}, xid, musterv1.ExitCause_EXIT_CAUSE_GPU_XID, 0, 2, 79},
		{"SIGXCPU", &musterv1.WorkerExited{Signal: 24}, failure.Facts{}, musterv1.ExitCause_EXIT_CAUSE_RLIMIT_CPU, 0, 0, 0},
		{"SIGXFSZ", &musterv1.WorkerExited{Signal: 25}, failure.Facts{}, musterv1.ExitCause_EXIT_CAUSE_RLIMIT_FSIZE, 0, 0, 0},
		{"pids refused", &musterv1.WorkerExited{ExitCode: 1}, failure.Facts{PidsRefused: 1}, musterv1.ExitCause_EXIT_CAUSE_CGROUP_PIDS, 0, 0, 0},
		{"ended well", &musterv1.WorkerExited{}, oom, musterv1.ExitCause_EXIT_CAUSE_UNSPECIFIED, 0, 0, 0},
		{"stopped by muster", &musterv1.WorkerExited{Signal: 9, Stopped: true}, oom, musterv1.ExitCause_EXIT_CAUSE_UNSPECIFIED, 0, 0, 0},
		{"never started", &musterv1.WorkerExited{ExitCode: 1, Error: "exec: no such file"}, oom, musterv1.ExitCause_EXIT_CAUSE_UNSPECIFIED, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failure.Explain(tt.ex, tt.facts)
			if tt.ex.GetCause() != tt.cause || tt.ex.GetMemoryLimitBytes() != tt.limit || tt.ex.GetGpu() != tt.gpu || tt.ex.GetXid() != tt.xid {
				t.Fatalf("cause %v limit %d gpu %d xid %d, want %v %d %d %d", tt.ex.GetCause(), tt.ex.GetMemoryLimitBytes(),
					tt.ex.GetGpu(), tt.ex.GetXid(), tt.cause, tt.limit, tt.gpu, tt.xid)
			}
		})
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{100: "100 bytes", 64 << 20: "64 MiB", 512 << 20: "512 MiB", 3 << 29: "1.5 GiB", 1536: "1.5 KiB", 5 << 40: "5 TiB"} {
		if got := failure.Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestExitCauseAndLossCause(t *testing.T) {
	for _, tc := range []struct {
		ex   *musterv1.WorkerExited
		want string
	}{
		{&musterv1.WorkerExited{}, "exited"},
		{&musterv1.WorkerExited{ExitCode: 3}, "exit_code"},
		{&musterv1.WorkerExited{Signal: 9}, "signal"},
		{&musterv1.WorkerExited{Signal: 15, Stopped: true}, "stopped"},
		{&musterv1.WorkerExited{Error: "exec: not found"}, "not_started"},
		{&musterv1.WorkerExited{Stopped: true, NodeLoss: &musterv1.NodeLoss{}}, "node_lost"},
		{&musterv1.WorkerExited{Signal: 9, Cause: musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED}, "oom_killed"},
		{&musterv1.WorkerExited{ExitCode: 1, Cause: musterv1.ExitCause_EXIT_CAUSE_GPU_XID, Xid: 79}, "gpu_xid"},
		{&musterv1.WorkerExited{Signal: 24, Cause: musterv1.ExitCause_EXIT_CAUSE_RLIMIT_CPU}, "rlimit_cpu"},
		{&musterv1.WorkerExited{Signal: 25, Cause: musterv1.ExitCause_EXIT_CAUSE_RLIMIT_FSIZE}, "rlimit_fsize"},
		{&musterv1.WorkerExited{ExitCode: 1, Cause: musterv1.ExitCause_EXIT_CAUSE_CGROUP_PIDS}, "cgroup_pids"},
	} {
		if got := failure.ExitCause(tc.ex); got != tc.want {
			t.Errorf("ExitCause(%v) = %q, want %q", tc.ex, got, tc.want)
		}
	}
	for _, tc := range []struct {
		signal musterv1.LossSignal
		want   string
	}{
		{musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, "gossip_dead"},
		{musterv1.LossSignal_LOSS_SIGNAL_SILENT, "silent"},
		{musterv1.LossSignal_LOSS_SIGNAL_UNSPECIFIED, "unknown"},
		{musterv1.LossSignal(99), "unknown"},
	} {
		if got := failure.LossCause(&musterv1.NodeLoss{Signal: tc.signal}); got != tc.want {
			t.Errorf("LossCause(%v) = %q, want %q", tc.signal, got, tc.want)
		}
	}
}

func TestDescribeHang(t *testing.T) {
	tests := []struct {
		name string
		ex   *musterv1.WorkerExited
		want string
	}{
		{"waited for by three", &musterv1.WorkerExited{Rank: 1, Node: "b", LocalRank: 1, Signal: 6, Hang: &musterv1.WorkerHang{
			SilentMs: 10_040, TimeoutMs: 10_000, Waiting: []int32{0, 2, 3}, WaitingCount: 3}},
			"rank 1 (node b, local rank 1) hung: no heartbeat for 10.0 s (--hang-timeout 10s); ranks 0, 2, 3 were waiting"},
		{"one waiting, a flight recorder", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 6, Hang: &musterv1.WorkerHang{
			SilentMs: 2500, TimeoutMs: 2000, Waiting: []int32{1}, WaitingCount: 1, FlightRecorder: "/logs/j-1/nccl-trace-rank-0"}},
			"rank 0 (node a, local rank 0) hung: no heartbeat for 2.5 s (--hang-timeout 2s); rank 1 was waiting; " +
				"its NCCL flight recorder is in /logs/j-1/nccl-trace-rank-0"},
		{"never beat, others hung too, many waiting", &musterv1.WorkerExited{Rank: 4, Node: "c", LocalRank: 0, Signal: 9, Hang: &musterv1.WorkerHang{
			SilentMs: 60_000, TimeoutMs: 60_000, NeverBeat: true, AlsoHung: []int32{5}, Waiting: []int32{0, 1}, WaitingCount: 70}},
			"rank 4 (node c, local rank 0) hung: no first heartbeat in 60.0 s (--hang-first-timeout 1m0s); rank 5 hung too; " +
				"ranks 0, 1, … (70 in all) were waiting"},
		{"named by NCCL's RAS", &musterv1.WorkerExited{Rank: 2, Node: "vm", LocalRank: 2, Signal: 6, Hang: &musterv1.WorkerHang{
			SilentMs: 10_040, TimeoutMs: 10_000, Waiting: []int32{0, 1, 3}, WaitingCount: 3, Verdict: &musterv1.HangVerdict{
				Evidence: musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS, Culprits: []int32{2}, Launched: 20,
				Collective: &musterv1.Collective{Communicator: "5974ff3706582d81", Op: "AllReduce", Seq: 21}}}},
			"rank 2 (node vm, local rank 2) hung: it launched AllReduce only up to operation 20, where the others launched up to 21 " +
				"(NCCL communicator 5974ff3706582d81); no heartbeat for 10.0 s (--hang-timeout 10s); ranks 0, 1, 3 were waiting; evidence: NCCL's RAS"},
		{"a stopped process, by NCCL's RAS", &musterv1.WorkerExited{Rank: 2, Node: "vm", LocalRank: 2, Signal: 6, Hang: &musterv1.WorkerHang{
			Waiting: []int32{0, 1, 3}, WaitingCount: 3, Verdict: &musterv1.HangVerdict{
				Evidence: musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS, Culprits: []int32{2}, Missing: true,
				Collective: &musterv1.Collective{Communicator: "c0ffee", Op: "AllReduce", Seq: 7}}}},
			"rank 2 (node vm, local rank 2) hung: its process stopped answering NCCL (no data from it for communicator c0ffee, " +
				"where the others launched AllReduce up to operation 7); ranks 0, 1, 3 were waiting; evidence: NCCL's RAS"},
		{"named by the flight recorders, two culprits", &musterv1.WorkerExited{Rank: 1, Node: "a", LocalRank: 1, Signal: 6, Hang: &musterv1.WorkerHang{
			SilentMs: 2100, TimeoutMs: 2000, Waiting: []int32{0}, WaitingCount: 1, FlightRecorder: "/logs/j-1/nccl-trace-rank-1",
			Verdict: &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_FLIGHT_RECORDER, Culprits: []int32{1, 3},
				Collective: &musterv1.Collective{ProcessGroup: "1", ProcessGroupName: "tp", Op: "nccl:all_gather", Seq: 8}}}},
			"rank 1 (node a, local rank 1) hung: it never entered nccl:all_gather #8 of process group 1 (tp); no heartbeat for 2.1 s " +
				"(--hang-timeout 2s); rank 3 hung too; rank 0 was waiting; evidence: PyTorch's flight recorders; " +
				"its NCCL flight recorder is in /logs/j-1/nccl-trace-rank-1"},
		{"named by heartbeats", &musterv1.WorkerExited{Rank: 2, Node: "a", LocalRank: 2, Signal: 6, Hang: &musterv1.WorkerHang{
			SilentMs: 2050, TimeoutMs: 2000, Waiting: []int32{0, 1, 3}, WaitingCount: 3,
			Verdict: &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_HEARTBEATS, Culprits: []int32{2}, LeadMs: 50}}},
			"rank 2 (node a, local rank 2) hung: no heartbeat for 2.0 s (--hang-timeout 2s); ranks 0, 1, 3 were waiting; " +
				"evidence: heartbeats (its last 50 ms before any other rank's)"},
		{"heartbeats cannot tell", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 6, Hang: &musterv1.WorkerHang{
			SilentMs: 2010, TimeoutMs: 2000, Verdict: &musterv1.HangVerdict{CannotTell: true, Silent: []int32{0, 1, 2, 3}, SilentCount: 4, ResolutionMs: 20}}},
			"ranks 0, 1, 2, 3 hung, and heartbeats cannot tell which rank hung first: they went silent within 20 ms of each other; " +
				"no heartbeat for 2.0 s (--hang-timeout 2s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.Describe(&musterv1.JobSpec{}, tt.ex); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
