package rendezvous_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
)

// --no-restart-exit-codes and --restart-on node-loss keep a failed worker
// from a restart, saying which rule did; other failures, and a lost node,
// still restart.
func TestRestartPolicy(t *testing.T) {
	for _, tt := range []struct {
		name     string
		codes    []int32
		on       musterv1.RestartOn
		code     int32 // rank 1's exit code; 0: node b is lost instead
		restarts bool
		why      string
	}{
		{"a no-restart code", []int32{93}, 0, 93, false, "exit code 93 is one of --no-restart-exit-codes"},
		{"another code", []int32{93, 94}, 0, 7, true, ""},
		{"node-loss only, a failed worker", nil, musterv1.RestartOn_RESTART_ON_NODE_LOSS, 7, false, "--restart-on node-loss"},
		{"node-loss only, a lost node", nil, musterv1.RestartOn_RESTART_ON_NODE_LOSS, 0, true, ""},
		{"any, a failed worker", nil, musterv1.RestartOn_RESTART_ON_ANY, 7, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := rendezvoustest.NewStore(t, nil)
			c := rendezvoustest.NewClient(t, s, security.Security{})
			a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
			b := newTestAgent(t, c, "b", "10.0.0.2", 1, 0)
			sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
				Nnodes: 2, MinNodes: 1, Nproc: 1, MaxRestarts: 3, WaitTimeoutMs: 10_000,
				NoRestartExitCodes: tt.codes, RestartOn: tt.on}})
			if err != nil {
				t.Fatal(err)
			}
			evs := watchEvents(t, c, sub.JobId)
			reservePorts(t, c, a, 1000, 1001)
			startsOf(t, a, b)
			if tt.code == 0 {
				s.Store().SetLiveness("b", rendezvous.Liveness{State: rendezvous.GossipDead, Silent: time.Second})
			} else if err := b.publish(exited(sub.JobId, 1, tt.code, 0, false)); err != nil {
				t.Fatal(err)
			}
			stopsOf(t, a)
			if err := a.publish(exited(sub.JobId, 0, 0, 15, true)); err != nil {
				t.Fatal(err)
			}
			ev := nextEvent(t, evs, "restart or end", func(ev *musterv1.JobEvent) bool {
				return ev.GetRestarting() != nil || ev.GetFinished() != nil
			})
			if got := ev.GetRestarting() != nil; got != tt.restarts {
				t.Fatalf("restarted %v, want %v: %v", got, tt.restarts, ev)
			}
			if fin := ev.GetFinished(); fin != nil && (fin.ExitCode != tt.code || !strings.Contains(fin.Summary, tt.why)) {
				t.Fatalf("job ended with code %d, %q; want %d, naming %q", fin.ExitCode, fin.Summary, tt.code, tt.why)
			}
		})
	}
}

// The back-off doubles from --restart-backoff to --restart-backoff-max; a
// round forms no sooner, and the job's end names every round's cause.
func TestRestartBackoffAndRoundCauses(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 1, Nproc: 1, MaxRestarts: 3, RestartBackoffMs: 200, RestartBackoffMaxMs: 300}})
	if err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, sub.JobId)
	wantBackoff := []int64{200, 300, 300}
	var failed time.Time
	for round := int32(0); round <= 3; round++ {
		reservePorts(t, c, a, 1000+2*round, 1001+2*round)
		if round > 0 {
			// Asked for ports no sooner than the back-off after the failure.
			if waited, least := time.Since(failed), time.Duration(wantBackoff[round-1])*time.Millisecond; waited < least {
				t.Fatalf("round %d formed %s after the failure, within its back-off of %s", round, waited, least)
			}
		}
		startsOf(t, a)
		failed = time.Now()
		if err := a.publish(exited(sub.JobId, 0, 7, 0, false)); err != nil {
			t.Fatal(err)
		}
		if round == 3 {
			break
		}
		re := nextEvent(t, evs, "restart", func(ev *musterv1.JobEvent) bool { return ev.GetRestarting() != nil }).GetRestarting()
		if re.BackoffMs != wantBackoff[round] {
			t.Fatalf("round %d: back-off %d ms, want %d", round, re.BackoffMs, wantBackoff[round])
		}
		stopsOf(t, a)
	}
	fin := nextFinished(t, evs)
	if fin.ExitCode != 7 || len(fin.RoundCauses) != 3 {
		t.Fatalf("job ended %v, want code 7 and three rounds' causes", fin)
	}
	for i, cause := range fin.RoundCauses {
		if want := fmt.Sprintf("round %d: rank 0 (node n, local rank 0) exited with code 7", i); cause != want {
			t.Errorf("cause %d: %q, want %q", i, cause, want)
		}
	}
}
