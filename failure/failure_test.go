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
		{"signal", "", &musterv1.WorkerExited{Rank: 0, Node: "a", Signal: 9},
			"rank 0 (node a, local rank 0) was killed by signal 9 (SIGKILL)"},
		{"error", "", &musterv1.WorkerExited{Rank: 2, Node: "a", LocalRank: 2, Error: "called MPI_Abort with exit code 7"},
			"rank 2 (node a, local rank 2): called MPI_Abort with exit code 7"},
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.DescribeLoss(tt.loss); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.Describe(&musterv1.JobSpec{}, tt.ex); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
