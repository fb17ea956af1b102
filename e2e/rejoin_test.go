package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// conflictLine is what an agent logs when gossip refuses a member whose
// name another member has at another address.
const conflictLine = "two members with one name"

// A node whose agent comes back under its name after another kind of
// start (a store refused at start, or an agent killed and started again
// with --advertise) takes its gossip entry back: no name conflict is
// logged, and gossip's failure detection of it holds: a 1 s blackout of
// it, or of another node, does not make it dead (with the conflict, it was
// declared dead 0.5 s into one; 1 s leaves a loaded machine room).
func TestNetnsNodeBackUnderItsName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// away stops c's agent and does what comes before its return;
		// back starts it again.
		away func(nw *network, c *host, old *agent)
		back func(nw *network, c *host) *agent
	}{
		{
			"after a refused store",
			func(nw *network, c *host, old *agent) {
				old.cmd.Process.Signal(syscall.SIGTERM)
				old.cmd.Wait()
				out, err := nw.runAgentIn(c, append([]string{"--name", "c", "--join", nw.hosts[0].ip}, nw.storeArgs(c)...)...)
				var exit *exec.ExitError
				if !errors.As(err, &exit) || !strings.Contains(out, "this gossip cluster has a store already") {
					nw.t.Fatalf("second store: %v\n%s", err, out)
				}
			},
			func(nw *network, c *host) *agent { return nw.join(c, nw.token) },
		},
		{
			"killed, back with --advertise",
			func(nw *network, c *host, old *agent) { kill9(nw.t, old) },
			func(nw *network, c *host) *agent {
				return nw.startAgent(c, "c", "--join", nw.hosts[0].ip, "--advertise", c.ip, "--token-file", nw.token, "--tls-ca", nw.ca)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nw := newNetwork(t, 3)
			b, c := nw.host("b"), nw.host("c")
			nw.storeCerts(nw.host("a"), c)
			agents := nw.startCluster()
			tc.away(nw, c, agents["c"])
			agents["c"] = tc.back(nw, c)
			nw.stopTogetherAtCleanup([]*agent{agents["c"]})
			nw.waitReady(3, 20*time.Second)
			// The store's gossip has merged c's return.
			testwait.Until(t, 20*time.Second, "c alive in gossip", func() bool {
				ok, list := nw.listsNode("c")
				return ok && strings.Contains(nodeRow(list, "c"), " alive")
			})

			// Deaths count from here: a killed agent is rightly declared dead.
			from := map[string]int{}
			for name, ag := range agents {
				from[name] = len(ag.logText())
			}
			for _, h := range []*host{c, b} {
				nw.dropAll(h)
				time.Sleep(time.Second)
				nw.acceptAll(h)
			}
			// A death declared in the blackouts would be in the logs by now.
			time.Sleep(nodeTimeout + 2*time.Second)

			for name, ag := range agents {
				text := ag.logText()
				if n := strings.Count(text, conflictLine); n > 0 {
					t.Errorf("agent %s logged %q %d times", name, conflictLine, n)
				}
				for _, l := range jsonLines(text[min(from[name], len(text)):]) {
					if l["msg"] == "gossip" && l["node"] == "c" && l["state"] == "dead" ||
						l["msg"] == "gossip lost a peer; telling the store" && l["node"] == "c" {
						t.Errorf("agent %s: gossip declared c dead: %v", name, l)
					}
				}
			}
		})
	}
}

// jsonLines decodes an agent's log, one JSON object a line; other lines
// are skipped.
func jsonLines(text string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(text, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
