package rendezvous

import (
	"bytes"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// commandOfEveryKind is one command of each kind the store applies.
func commandOfEveryKind() []Command {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("train")}, Nnodes: 2, Gpus: 1, Nproc: 1}
	info := &musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1, Gpus: []*musterv1.GPU{{Index: 0, Name: "H100"}}}
	return []Command{
		&SubmitJob{JobID: "j-1", Token: "j-1.secret", Spec: spec, Owner: &musterv1.Identity{Uid: 1000, Gid: 1000}, At: at},
		&PublishEvents{Session: "s-1", FirstSeq: 3, Events: []*musterv1.JobEvent{output("j-1", 0, "hello\n"), exited("j-1", 1, 3)}, At: at},
		&CancelJob{JobID: "j-1", Force: true, Reason: "cancelled", Code: 130, At: at},
		&RestartJob{JobID: "j-1", Reason: "restarted", At: at},
		&CompleteRound{Session: "s-1", RoundID: "j-1-r0", Ports: []int32{29500, 29501}, Magic: 42, At: at},
		&RecordHealth{Session: "s-1", JobID: "j-1", RoundID: "j-1-r0", Health: &musterv1.NodeHealth{Ok: false, Reason: "ECC"}, At: at},
		&SignalJob{JobID: "j-1", Signal: 10, Coalesce: time.Second, At: at},
		&RegisterNode{Session: "s-1", Info: info, Key: "key-a", Jobs: []*musterv1.RunningJob{{JobId: "j-1", NodeRank: 0}},
			TorchStores: []string{"j-1"}, Forgotten: []string{"j-0"}, At: at},
		&LeaveNode{Session: "s-1", Reason: "shutting down", At: at},
		&RemoveNode{Session: "s-1", Loss: &musterv1.NodeLoss{Node: "a", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD},
			Renewed: at.Add(-time.Second), At: at},
		&FireTimer{JobID: "j-1", RoundID: "j-1-r0", Timer: TimerFence, Deadline: at.Add(time.Minute), Followed: true, At: at},
		&SetNodeSchedule{Name: "a", Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED, At: at},
	}
}

// Every command kind comes back from the log as it went in.
func TestCommandRoundTrip(t *testing.T) {
	for _, c := range commandOfEveryKind() {
		b, err := MarshalCommand(c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		back, err := UnmarshalCommand(b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		again, err := MarshalCommand(back)
		if err != nil || !bytes.Equal(again, b) {
			t.Errorf("%T: encoded again differently (%v)", back, err)
		}
	}
}

// Decoding never panics, and a command that decodes encodes to bytes that
// decode to the same command.
func FuzzUnmarshalCommand(f *testing.F) {
	for _, c := range commandOfEveryKind() {
		b, err := MarshalCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := UnmarshalCommand(b)
		if err != nil {
			return
		}
		once, err := MarshalCommand(c)
		if err != nil {
			t.Fatalf("%T decoded but does not encode: %v", c, err)
		}
		back, err := UnmarshalCommand(once)
		if err != nil {
			t.Fatalf("%T encoded does not decode: %v", c, err)
		}
		twice, err := MarshalCommand(back)
		if err != nil || !bytes.Equal(twice, once) {
			t.Fatalf("%T decoded again differs (%v)", back, err)
		}
	})
}
