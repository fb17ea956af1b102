package rendezvous

import (
	"errors"
	"strings"
	"testing"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A worker's start carries its binding to the store, within the bound on
// its size.
func TestStartedBindingBound(t *testing.T) {
	s, _ := recordingStore(t)
	sess, err := s.Register(&musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1}, "key-a", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	job, err := s.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 1, Nproc: 2, KillTimeoutMs: 1000}, &musterv1.Identity{Uid: 1000, Gid: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	agentCommands(t, s, sess)
	started := func(rank int32, b *musterv1.WorkerBinding) *musterv1.JobEvent {
		return &musterv1.JobEvent{JobId: job, Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{Rank: rank, Node: "a", Pid: 7, Binding: b}}}
	}
	tests := []struct {
		name string
		ev   *musterv1.JobEvent
		ok   bool
	}{
		{"a binding", started(0, &musterv1.WorkerBinding{Gpus: []int32{0}, NumaNodes: []int32{0}, Cpus: "0-55,112-167", Nic: "mlx5_0", NicBy: "switch"}), true},
		{"none", started(1, nil), true},
		{"too long", started(1, &musterv1.WorkerBinding{Unknown: strings.Repeat("x", jobspec.MaxBindingBytes)}), false},
	}
	for _, tt := range tests {
		_, err := s.Publish(t.Context(), sess, 0, []*musterv1.JobEvent{tt.ev})
		if tt.ok && err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if !tt.ok && (!errors.Is(err, ErrBadEvents) || !strings.Contains(err.Error(), "binding of")) {
			t.Errorf("%s: %v, want refused", tt.name, err)
		}
	}
}
