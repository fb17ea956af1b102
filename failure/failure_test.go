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
