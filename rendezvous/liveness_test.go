package rendezvous_test

import (
	"context"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeserver"
)

// A node is lost on whichever signal comes first: its agent gone once its
// stream broke, or gossip declaring it dead; otherwise it keeps its grace.
func TestNodeLossSignals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		agentGone bool
		gossip    *rendezvous.Liveness // what gossip says once the stream is up
		breakConn bool
		want      string // the job summary's start
	}{
		{name: "agent gone", agentGone: true, breakConn: true, want: "node a lost: agent connection closed"},
		{name: "agent alive keeps its grace", breakConn: true, want: "node a lost: watch stream ended, and its agent did not come back within 300ms"},
		{name: "gossip dead", gossip: &rendezvous.Liveness{State: rendezvous.GossipDead, Addr: "127.0.0.1:7946", Silent: 1300 * time.Millisecond},
			want: "node a lost: no gossip ack for 1.3 s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := make(chan string, 1)
			s := rendezvoustest.NewStore(t, func(c *storeserver.Config) {
				c.SessionGrace = 300 * time.Millisecond
				c.AgentGone = func(name string, _ time.Duration) bool {
					asked <- name
					return tt.agentGone
				}
			})
			c := rendezvoustest.NewClient(t, s, security.Security{})
			a, _ := keyedAgent(t, c, "a", "k")
			asg := startedJob(t, c, a, 2)
			if tt.gossip != nil {
				s.SetLiveness("a", *tt.gossip)
			}
			if tt.breakConn {
				a.cancel()
				if name := <-asked; name != "a" {
					t.Fatalf("asked whether %q is gone", name)
				}
			}
			fin := finalEvent(t, c, asg.JobId)
			if fin.State != musterv1.JobState_JOB_STATE_FAILED || !strings.HasPrefix(fin.Summary, tt.want) {
				t.Fatalf("final: %v; want summary %q", fin, tt.want)
			}
		})
	}
}

// `launcher nodes` shows each node's gossip state, and the nodes gossip
// knows that are not registered.
func TestNodesShowGossipState(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	keyedAgent(t, c, "a", "k")
	s.SetLiveness("a", rendezvous.Liveness{State: rendezvous.GossipAlive, Addr: "10.0.0.1:7946"})
	s.SetLiveness("z", rendezvous.Liveness{State: rendezvous.GossipLeft, Addr: "10.0.0.9:7946"})
	s.SetLiveness("y", rendezvous.Liveness{State: rendezvous.GossipDead, Addr: "10.0.0.8:7946"})
	resp, err := c.ListNodes(context.Background(), &musterv1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range resp.Nodes {
		got = append(got, n.Node.Name+"/"+n.Node.Addr+"/"+n.Gossip)
	}
	if want := "a/127.0.0.1/alive y/10.0.0.8/dead z/10.0.0.9/left"; strings.Join(got, " ") != want {
		t.Fatalf("nodes %q, want %q", strings.Join(got, " "), want)
	}
}

// A loss an agent reports (it knows not every node of a large job) fails
// the jobs of that agent's node that had the lost node, naming who saw it;
// the report names the reporter as the observer, whatever it claims, and
// a report of a node outside the job changes nothing.
func TestReportedLossStopsTheReportersJobs(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	b := newTestAgent(t, c, "b", "10.0.0.2", 1, 0)
	newTestAgent(t, c, "other", "10.0.0.3", -1, 0)
	resp, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("x"), Nnodes: 2, Nproc: 1, KillTimeoutMs: 100, Hosts: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, a, 1000, 1001)
	startsOf(t, a, b)
	report := func(n *testAgent, loss *musterv1.NodeLoss) {
		t.Helper()
		if _, err := c.ReportLoss(context.Background(), &musterv1.ReportLossRequest{Session: n.session, Loss: loss}); err != nil {
			t.Fatal(err)
		}
	}
	report(a, &musterv1.NodeLoss{Node: "other", Observer: "z", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, SilentMs: 900})
	report(a, &musterv1.NodeLoss{Node: "b", Observer: "z", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, SilentMs: 5200})
	if reason := stopsOf(t, a); !strings.Contains(reason, "node b lost") {
		t.Fatalf("a told to stop for %q", reason)
	}
	if err := a.publish(exited(resp.JobId, 0, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	fin := finalEvent(t, c, resp.JobId)
	if fin.Summary != "node b lost: no gossip ack for 5.2 s, confirmed by node a" || fin.ExitCode != 1 {
		t.Fatalf("final: %v", fin)
	}
	if _, err := c.ReportLoss(context.Background(), &musterv1.ReportLossRequest{Session: a.session,
		Loss: &musterv1.NodeLoss{Node: "not a name!"}}); err == nil {
		t.Fatal("a loss of a node named \"not a name!\" was taken")
	}
}
