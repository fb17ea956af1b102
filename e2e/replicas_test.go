package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// A replicated store on namespace hosts: a, b and c host its replicas,
// every other host an agent that finds it through gossip.
type replicated struct {
	*network
	replicas map[string]*agent // by host name
	workers  map[string]*agent
}

// replicaAddrs is --store-peers: the first three hosts' store addresses.
func (nw *network) replicaAddrs() string {
	var out []string
	for _, h := range nw.hosts[:3] {
		out = append(out, h.ip+":29400")
	}
	return strings.Join(out, ",")
}

// startReplicated starts the three replicas and the other hosts' agents,
// and waits until every node is registered.
func startReplicated(t *testing.T, n int) *replicated {
	t.Helper()
	nw := newNetwork(t, n)
	nw.storeCerts(nw.hosts[0], nw.hosts[1], nw.hosts[2])
	r := &replicated{network: nw, replicas: map[string]*agent{}, workers: map[string]*agent{}}
	var all []*agent
	for _, h := range nw.hosts[:3] {
		r.replicas[h.name] = nw.startAgent(h, h.name, r.replicaArgs(h, nw.replicaAddrs())...)
		all = append(all, r.replicas[h.name])
	}
	for _, h := range nw.hosts[3:] {
		r.workers[h.name] = nw.startAgent(h, h.name, "--join", nw.hosts[0].ip, "--token-file", nw.token, "--tls-ca", nw.ca)
		all = append(all, r.workers[h.name])
	}
	nw.stopTogetherAtCleanup(all)
	testwait.Until(t, 30*time.Second, "every node registered with the replicas' leader", func() bool {
		return r.runOn(nw.hosts[n-1], "run", "-n", strconv.Itoa(n), "--wait-timeout", "0", "--", "true").code == 0
	})
	return r
}

// launcherOn starts the launcher on h, with the replicas as --cluster.
func (r *replicated) launcherOn(h *host, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	r.t.Helper()
	full := append([]string{"netns", "exec", h.ns, launcherBin, args[0],
		"--cluster", r.replicaAddrs(), "--token-file", r.token, "--tls-ca", r.ca}, args[1:]...)
	cmd := exec.Command("ip", full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &out, &errb
}

func (r *replicated) runOn(h *host, args ...string) result {
	r.t.Helper()
	cmd, out, errb := r.launcherOn(h, args...)
	return wait(r.t, cmd, out, errb)
}

// leader is the host whose replica leads now, as `launcher stores` says;
// "" when none does.
func (r *replicated) leader() string {
	r.t.Helper()
	for addr, role := range r.roles(r.replicaAddrs()) {
		if role != "leader" {
			continue
		}
		for _, h := range r.hosts {
			if h.ip+":29400" == addr {
				return h.name
			}
		}
	}
	return ""
}

// The leader's agent is killed, or cut off, while a job runs on two other
// nodes: the job runs on past the fence bound and ends with its own exit
// code, its output whole, and the launcher that follows it sees it through.
func TestNetnsReplicasKeepJobsThroughTheLeadersLoss(t *testing.T) {
	for _, tt := range []struct {
		name string
		lose func(r *replicated, leader *host) // what happens to the leader
	}{
		{"killed", func(r *replicated, leader *host) { kill9(r.t, r.replicas[leader.name]) }},
		{"cut off", func(r *replicated, leader *host) {
			r.dropAll(leader)
			// Past raft's election, not past the fence: the old leader
			// comes back as a follower.
			time.Sleep(10 * time.Second)
			r.acceptAll(leader)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := startReplicated(t, 5)
			d := r.host("d")
			dir := t.TempDir()
			script := `i=0; touch ` + dir + `/started-$RANK; while [ ! -e ` + dir + `/go ]; do i=$((i+1)); echo "rank $RANK line $i"; sleep 0.2; done; echo "rank $RANK end"; exit 3`
			cmd, out, errb := r.launcherOn(d, "run", "-H", "d,e", "--", "sh", "-c", script)
			testwait.Until(t, 20*time.Second, "both workers running", func() bool {
				m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
				return len(m) == 2
			})
			leader := r.leader()
			if leader == "" {
				t.Fatal("no replica said it leads")
			}
			lostAt := time.Now()
			tt.lose(r, r.host(leader))
			// The fence bound is 15 s: jobs that outlive it were not stopped for it.
			time.Sleep(time.Until(lostAt.Add(18 * time.Second)))
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			res := wait(t, cmd, out, errb)
			if res.code != 3 {
				t.Fatalf("job after the leader (%s) was %s: exit %d, want 3; stderr:\n%s", leader, tt.name, res.code, res.stderr)
			}
			// Each rank's lines come once each and in order, however the job's
			// first exit cut the other rank short.
			for _, rank := range []string{"0", "1"} {
				n := 0
				for _, l := range strings.Split(res.stdout, "\n") {
					if !strings.Contains(l, "rank "+rank+" line ") {
						continue
					}
					n++
					if want := "rank " + rank + " line " + strconv.Itoa(n); !strings.HasSuffix(l, want) {
						t.Fatalf("rank %s: line %d is %q, want %q: output lost or doubled across the failover:\n%s", rank, n, l, want, res.stdout)
					}
				}
				if n < 50 {
					t.Fatalf("rank %s: %d lines in %s, want one each 0.2 s:\n%s", rank, n, time.Since(lostAt), res.stdout)
				}
			}
			for _, w := range r.workers {
				if strings.Contains(w.logText(), "workers are stopped") {
					t.Errorf("a worker node fenced its workers:\n%s", w.logText())
				}
			}
		})
	}
}

// replicaArgs are the flags of the agent hosting h's replica of peers.
func (r *replicated) replicaArgs(h *host, peers string, extra ...string) []string {
	args := append([]string{"--join", r.hosts[0].ip, "--store-peers", peers,
		"--data-dir", filepath.Join(r.dir, "data-"+h.name)}, r.storeArgs(h)...)
	return append(args, extra...)
}

// storesCmd runs `launcher stores VERB ADDR` on h against the replicas.
func (r *replicated) storesCmd(h *host, verb, addr string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", h.ns, launcherBin, "stores", verb, addr, "--cluster", r.replicaAddrs(),
		"--token-file", r.token, "--tls-ca", r.ca).CombinedOutput()
	return string(out), err
}

// roles asks `launcher stores` of the replicas: each address's role.
func (r *replicated) roles(cluster string) map[string]string {
	r.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", r.hosts[3].ns, launcherBin, "stores", "--cluster", cluster,
		"--token-file", r.token, "--tls-ca", r.ca, "-o", "json")
	out, _ := cmd.Output()
	var list struct {
		Items []struct{ Address, Role string }
	}
	json.Unmarshal(out, &list)
	roles := map[string]string{}
	for _, it := range list.Items {
		roles[it.Address] = it.Role
	}
	return roles
}

// settled says whether every address of cluster answers, one leading and
// the others following it.
func (r *replicated) settled(cluster string) bool {
	roles := r.roles(cluster)
	leaders, followers := 0, 0
	for _, role := range roles {
		switch role {
		case "leader":
			leaders++
		case "follower":
			followers++
		}
	}
	return leaders == 1 && leaders+followers == len(strings.Split(cluster, ","))
}

// Every replica restarted in turn (a rolling upgrade), then one replaced
// by a new node: the job on another node runs through it all and ends with
// its own exit code.
func TestNetnsReplicasRollingRestartAndReplacement(t *testing.T) {
	t.Parallel()
	r := startReplicated(t, 5) // a, b, c replicas; d runs the job; e replaces c
	a, b, c, d, e := r.host("a"), r.host("b"), r.host("c"), r.host("d"), r.host("e")
	r.workers["e"].cmd.Process.Signal(syscall.SIGTERM) // e becomes a replica below
	r.workers["e"].cmd.Wait()
	delete(r.workers, "e")
	r.storeCerts(a, b, c, e)
	dir := t.TempDir()
	script := `touch ` + dir + `/started; while [ ! -e ` + dir + `/go ]; do sleep 0.1; done; exit 3`
	cmd, out, errb := r.launcherOn(d, "run", "-H", "d", "--", "sh", "-c", script)
	testwait.Until(t, 20*time.Second, "the worker running", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	peers := r.replicaAddrs()
	for _, h := range []*host{a, b, c} {
		old := r.replicas[h.name]
		old.cmd.Process.Signal(syscall.SIGTERM)
		old.cmd.Wait()
		r.replicas[h.name] = r.startAgent(h, h.name, r.replicaArgs(h, peers)...)
		testwait.Until(t, 30*time.Second, "the replicas settled after "+h.name+"'s restart", func() bool { return r.settled(peers) })
	}
	// c dies for good; e takes its place.
	kill9(t, r.replicas["c"])
	testwait.Until(t, 30*time.Second, "a leader without c", func() bool {
		return r.roles(peers)[r.hosts[0].ip+":29400"] != "" && r.settled(a.ip+":29400,"+b.ip+":29400")
	})
	newPeers := a.ip + ":29400," + b.ip + ":29400," + e.ip + ":29400"
	if out, err := r.storesCmd(d, "remove", c.ip+":29400"); err != nil {
		t.Fatalf("stores remove: %v: %s", err, out)
	}
	r.replicas["e"] = r.startAgent(e, e.name, r.replicaArgs(e, newPeers, "--store-join")...)
	if out, err := r.storesCmd(d, "add", e.ip+":29400"); err != nil {
		t.Fatalf("stores add: %v: %s", err, out)
	}
	testwait.Until(t, 30*time.Second, "a, b and e settled", func() bool { return r.settled(newPeers) })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, cmd, out, errb); res.code != 3 {
		t.Fatalf("the job through the restarts and the replacement: exit %d, want 3; stderr:\n%s", res.code, res.stderr)
	}
}
