package rendezvous_test

import (
	"context"
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
)

func (a *testAgent) reportHealth(job, round string, h *musterv1.NodeHealth) {
	a.t.Helper()
	if _, err := a.c.ReportHealth(context.Background(), &musterv1.ReportHealthRequest{Session: a.session,
		JobId: job, RoundId: round, Health: h}); err != nil {
		a.t.Fatal(err)
	}
}

var diskFull = &musterv1.NodeHealth{Ok: false, Check: "agent command", Reason: `"check" exited with code 1 after 5ms: disk full`}

// A node that fails its health check is left out of the job's rounds: the
// round starts again without it, not counted as a restart, on a spare node
// when there is one; without one the job fails naming the node and why.
// `launcher nodes` shows each node's last result.
func TestUnhealthyNodeIsLeftOut(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spare bool
	}{{"a spare takes its place", true}, {"no spare", false}} {
		t.Run(tt.name, func(t *testing.T) {
			s := rendezvoustest.NewStore(t, nil)
			c := rendezvoustest.NewClient(t, s, security.Security{})
			a := newTestAgent(t, c, "a", "10.0.0.1", -1, 0)
			b := newTestAgent(t, c, "b", "10.0.0.2", -1, 0)
			var spare *testAgent
			if tt.spare {
				spare = newTestAgent(t, c, "c", "10.0.0.3", -1, 0)
			}
			sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
				Nnodes: 2, Nproc: 1, KillTimeoutMs: 100}})
			if err != nil {
				t.Fatal(err)
			}
			evs := watchEvents(t, c, sub.JobId)
			reservePorts(t, c, a, 1000, 1001)
			asgs := startsOf(t, a, b)
			a.reportHealth(sub.JobId, asgs[0].RoundId, &musterv1.NodeHealth{Ok: true, Check: "gpus (no GPUs)"})
			b.reportHealth(sub.JobId, asgs[1].RoundId, diskFull)
			// b's start fails with its workers; a's are stopped.
			if err := b.publish(&musterv1.JobEvent{JobId: sub.JobId, Event: &musterv1.JobEvent_Exited{Exited: &musterv1.WorkerExited{
				Rank: 1, ExitCode: 1, Node: "b", Error: "node b failed its health check"}}}); err != nil {
				t.Fatal(err)
			}
			if reason := stopsOf(t, a); !strings.Contains(reason, "node b failed its health check (agent command): ") {
				t.Fatalf("stop reason %q", reason)
			}
			if err := a.publish(exited(sub.JobId, 0, 0, 15, true)); err != nil {
				t.Fatal(err)
			}
			re := nextEvent(t, evs, "restart", func(ev *musterv1.JobEvent) bool { return ev.GetRestarting() != nil }).GetRestarting()
			if re.Counted || !strings.Contains(re.Reason, "disk full") {
				t.Fatalf("restart %v, want one not counted naming the reason", re)
			}
			nodes, err := c.ListNodes(context.Background(), &musterv1.ListNodesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			health := map[string]*musterv1.NodeHealth{}
			for _, n := range nodes.Nodes {
				health[n.Node.Name] = n.Health
			}
			if !health["a"].GetOk() || health["b"].GetOk() || health["b"].GetReason() != diskFull.Reason || health["b"].GetJobId() != sub.JobId {
				t.Fatalf("nodes' health: a %v, b %v", health["a"], health["b"])
			}
			if !tt.spare {
				fin := nextFinished(t, evs)
				if fin.ExitCode != 1 || !strings.Contains(fin.Summary, "node b failed its health check (agent command): ") {
					t.Fatalf("job ended %v", fin)
				}
				return
			}
			reservePorts(t, c, a, 1002, 1003)
			for _, asg := range startsOf(t, a, spare) {
				if strings.Join(asg.NodeNames, " ") != "a c" || asg.RestartCount != 0 {
					t.Fatalf("round 1 on %v, restart %d; want a and c, no restart", asg.NodeNames, asg.RestartCount)
				}
			}
		})
	}
}
