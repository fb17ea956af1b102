package rendezvous_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// A job's events tell its lifecycle as facts: each round's start with its
// nodes and the hash of the unique ID its workers got, a lost node with
// its signal before the restart it brings, the time of each, and the job
// table's times, round and restarts.
func TestLifecycleEvents(t *testing.T) {
	s, c, a, b, sub := elasticPair(t)
	evs := watchEvents(t, c, sub.JobId)
	reservePorts(t, c, a, 1000, 1001)
	first := startsOf(t, a, b)[0]
	r0 := nextEvent(t, evs, "round 0's start", func(ev *musterv1.JobEvent) bool { return ev.GetRoundStarted() != nil }).GetRoundStarted()
	hash := func(id []byte) string { h := sha256.Sum256(id); return hex.EncodeToString(h[:]) }
	if r0.Round != 0 || !slices.Equal(r0.Nodes, []string{"a", "b"}) || r0.WorldSize != 2 || r0.MasterPort != 1000 ||
		r0.UniqueIdSha256 != hash(first.NcclUniqueId) || r0.RoundId != first.RoundId {
		t.Fatalf("round 0: %v, assignment %v", r0, first)
	}

	s.Store().SetLiveness("b", rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 1200 * time.Millisecond})
	var lost *musterv1.NodeLoss
	ev := nextEvent(t, evs, "loss or restart", func(ev *musterv1.JobEvent) bool {
		return ev.GetNodeLost() != nil || ev.GetRestarting() != nil
	})
	if lost = ev.GetNodeLost(); lost == nil || lost.Node != "b" || lost.Signal != musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD || lost.SilentMs != 1200 {
		t.Fatalf("first of loss and restart: %v, want b lost by gossip", ev)
	}
	if re := nextEvent(t, evs, "restart", func(ev *musterv1.JobEvent) bool { return ev.GetRestarting() != nil }).GetRestarting(); re.RestartCount != 1 {
		t.Fatalf("restart %v", re)
	}
	stopsOf(t, a)
	if err := a.publish(exited(sub.JobId, 0, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, a, 1002, 1003)
	second := startsOf(t, a)[0]
	r1 := nextEvent(t, evs, "round 1's start", func(ev *musterv1.JobEvent) bool { return ev.GetRoundStarted() != nil }).GetRoundStarted()
	if r1.Round != 1 || !slices.Equal(r1.Nodes, []string{"a"}) || r1.RestartCount != 1 || r1.UniqueIdSha256 != hash(second.NcclUniqueId) ||
		r1.UniqueIdSha256 == r0.UniqueIdSha256 {
		t.Fatalf("round 1: %v", r1)
	}
	if err := a.publish(exited(sub.JobId, 0, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	fin := nextEvent(t, evs, "the end", func(ev *musterv1.JobEvent) bool { return ev.GetFinished() != nil })
	if at := time.UnixMicro(fin.TimeUnixUs); time.Since(at) < 0 || time.Since(at) > time.Minute {
		t.Fatalf("the final event's time %v", at)
	}

	resp, err := c.ListJobs(context.Background(), nil)
	if err != nil || len(resp.Jobs) != 1 {
		t.Fatalf("jobs %v, %v", resp, err)
	}
	j := resp.Jobs[0]
	if j.SubmittedUnixMs == 0 || j.StartedUnixMs < j.SubmittedUnixMs || j.EndedUnixMs < j.StartedUnixMs || j.Rounds != 2 || j.Restarts != 1 {
		t.Fatalf("job %v: want submitted <= started <= ended, 2 rounds, 1 restart", j)
	}
}
