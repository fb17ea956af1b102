package e2e

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// network is hosts on one LAN: each host is a network namespace whose eth0
// is a veth into a bridge. The bridge has a namespace of its own, so that
// neither the machine's network nor its firewall (which may drop bridged
// traffic) takes part, and the subnet clashes with nothing.
type network struct {
	t     testing.TB
	sw    string // the bridge's namespace
	hosts []*host
	dir   string // certificates, tokens, the agents' directories
	token string // the cluster token's file
	ca    string
	// storeHost hosts the store the launchers submit to; nil: the first host.
	storeHost *host
}

// host is one machine of a network.
type host struct {
	name  string // its agent's --name: a, b, c, ...
	ns    string // its network namespace
	ip    string
	netns string // its namespace as /proc/PID/ns/net reads: net:[INODE]
}

// agent is an agent daemon running on a host.
type agent struct {
	cmd *exec.Cmd
	log string // its log file
}

func (a *agent) logText() string {
	b, _ := os.ReadFile(a.log)
	return string(b)
}

// newNetwork makes n hosts named a, b, c, ... (hostName); the first hosts
// the store.
// Everything is removed when the test ends, whatever its outcome.
func newNetwork(t testing.TB, n int) *network {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("multi-host tests need root for network namespaces")
	}
	timedAlone(t)
	// Names unique to this process and test; interface names stay eth0 and
	// the host's name, which only have to be unique in their namespace.
	h := fnv.New32a()
	fmt.Fprintf(h, "%d %s", os.Getpid(), t.Name())
	sum := h.Sum32()
	prefix := fmt.Sprintf("mu%08x-", sum)
	nw := &network{t: t, sw: prefix + "sw", dir: t.TempDir()}
	if out, err := exec.Command("ip", "netns", "add", nw.sw).CombinedOutput(); err != nil {
		t.Skipf("cannot make network namespaces: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(nw.remove)
	nw.ipCmd("-n", nw.sw, "link", "add", "br0", "type", "bridge")
	nw.ipCmd("-n", nw.sw, "link", "set", "dev", "br0", "up")
	for i := range n {
		h := &host{name: hostName(i), ns: prefix + hostName(i), ip: fmt.Sprintf("10.213.%d.%d", sum%256, i+1)}
		nw.ipCmd("netns", "add", h.ns)
		nw.hosts = append(nw.hosts, h)
		nw.ipCmd("link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", h.name, "netns", nw.sw)
		nw.ipCmd("-n", nw.sw, "link", "set", "dev", h.name, "master", "br0", "up")
		nw.ipCmd("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		nw.ipCmd("-n", h.ns, "link", "set", "dev", "eth0", "up")
		nw.ipCmd("-n", h.ns, "link", "set", "dev", "lo", "up")
		var st syscall.Stat_t
		if err := syscall.Stat("/run/netns/"+h.ns, &st); err != nil {
			t.Fatal(err)
		}
		h.netns = fmt.Sprintf("net:[%d]", st.Ino)
	}

	if out, err := exec.Command(launcherBin, "certs", "--dir", nw.dir, nw.hosts[0].ip).CombinedOutput(); err != nil {
		t.Fatalf("certs: %v: %s", err, out)
	}
	nw.ca = filepath.Join(nw.dir, "ca.pem")
	nw.token = nw.tokenFile("token", "0123456789abcdef0123456789abcdef")
	return nw
}

// hostName is the i-th host's name: a to z, then h26, h27, ... (at most
// 254 hosts, one /24).
func hostName(i int) string {
	if i < 26 {
		return string(rune('a' + i))
	}
	return fmt.Sprintf("h%d", i)
}

// remove kills what still runs on the hosts, then removes the namespaces;
// the veths and the bridge go with them.
func (nw *network) remove() {
	var names []string
	for _, h := range nw.hosts {
		names = append(names, h.ns)
	}
	for _, ns := range append(names, nw.sw) {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			nw.t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	}
}

// ipCmd runs ip with args and fails the test when it fails.
func (nw *network) ipCmd(args ...string) {
	nw.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		nw.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// tokenFile writes a cluster token into a file of the network's.
func (nw *network) tokenFile(name, token string) string {
	nw.t.Helper()
	path := filepath.Join(nw.dir, name)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		nw.t.Fatal(err)
	}
	return path
}

// store is the store's address, on the first host.
func (nw *network) store() string {
	if nw.storeHost != nil {
		return nw.storeHost.ip + ":29400"
	}
	return nw.hosts[0].ip + ":29400"
}

// host returns the host named name.
func (nw *network) host(name string) *host {
	for _, h := range nw.hosts {
		if h.name == name {
			return h
		}
	}
	nw.t.Fatalf("no host %s", name)
	return nil
}

// startAgent starts an agent named name on h with args. Its log goes to a
// file that a failing test prints; it stops when the test ends.
func (nw *network) startAgent(h *host, name string, args ...string) *agent {
	t := nw.t
	t.Helper()
	// A directory of its own, as on a machine of its own: job directories
	// of one agent are none of another's business.
	dir, err := os.MkdirTemp(nw.dir, "agent-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{log: filepath.Join(dir, "log")}
	f, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	args = append([]string{"netns", "exec", h.ns, agentBin, "--name", name, "--kill-timeout", "2s", "--rank-logs", filepath.Join(dir, "rank-logs")}, args...)
	a.cmd = exec.Command("ip", args...)
	a.cmd.Env = agentEnv("TMPDIR=" + dir)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Registered first, so that it runs after the agent stopped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s on host %s, log:\n%s", name, h.name, a.logText())
		}
	})
	stopAtCleanup(t, a.cmd, "agent "+name, a.logText)
	return a
}

// startHead starts the first host's agent, which hosts the store, and
// waits until the store takes jobs.
func (nw *network) startHead() *agent {
	nw.t.Helper()
	h := nw.hosts[0]
	a := nw.startAgent(h, h.name, "--listen", nw.store(), "--token-file", nw.token,
		"--tls-cert", filepath.Join(nw.dir, "store.pem"), "--tls-key", filepath.Join(nw.dir, "store-key.pem"),
		"--tls-ca", nw.ca, "--socket", filepath.Join(nw.dir, "store.sock"))
	testwait.Until(nw.t, 20*time.Second, "the store on "+h.name, func() bool { return nw.ready(1).code == 0 })
	return a
}

// join starts an agent on h that joins the cluster through gossip with the
// token in tokenFile.
func (nw *network) join(h *host, tokenFile string) *agent {
	nw.t.Helper()
	return nw.startAgent(h, h.name, "--join", nw.hosts[0].ip, "--token-file", tokenFile, "--tls-ca", nw.ca)
}

// startCluster starts an agent on every host and waits until all are
// registered.
func (nw *network) startCluster() map[string]*agent {
	nw.t.Helper()
	agents := map[string]*agent{nw.hosts[0].name: nw.startHead()}
	for _, h := range nw.hosts[1:] {
		agents[h.name] = nw.join(h, nw.token)
	}
	nw.waitReady(len(nw.hosts), 20*time.Second)
	nw.stopTogetherAtCleanup(slices.Collect(maps.Values(agents)))
	return agents
}

// stopTogetherAtCleanup sends every agent of agents SIGTERM at once when
// the test ends, before each agent's own cleanup waits for it to stop: the
// agents of a network then take as long to stop as the slowest, not their
// sum.
func (nw *network) stopTogetherAtCleanup(agents []*agent) {
	nw.t.Cleanup(func() {
		for _, a := range agents {
			a.cmd.Process.Signal(syscall.SIGTERM)
		}
	})
}

// launcher starts the launcher on the first host: args[0] is its command,
// followed by the cluster's flags and the rest of args.
func (nw *network) launcher(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	nw.t.Helper()
	full := append([]string{"netns", "exec", nw.hosts[0].ns, launcherBin, args[0],
		"--cluster", nw.store(), "--token-file", nw.token, "--tls-ca", nw.ca}, args[1:]...)
	cmd := exec.Command("ip", full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		nw.t.Fatal(err)
	}
	nw.t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &out, &errb
}

// run runs the launcher on the first host to its end.
func (nw *network) run(args ...string) result {
	nw.t.Helper()
	cmd, out, errb := nw.launcher(args...)
	return wait(nw.t, cmd, out, errb)
}

// ready runs a job on n nodes that does not wait for nodes: it succeeds
// only when n nodes are registered with the store.
func (nw *network) ready(n int) result {
	nw.t.Helper()
	return nw.run("run", "-n", strconv.Itoa(n), "--wait-timeout", "0", "--", "true")
}

// waitReady waits until n nodes are registered.
func (nw *network) waitReady(n int, d time.Duration) {
	nw.t.Helper()
	testwait.Until(nw.t, d, fmt.Sprintf("%d nodes registered", n), func() bool { return nw.ready(n).code == 0 })
}

// runsOn runs a job on hosts, one worker each, and checks that each ran one.
func (nw *network) runsOn(hosts ...*host) {
	nw.t.Helper()
	var names []string
	for _, h := range hosts {
		names = append(names, h.name)
	}
	r := nw.run("run", "-H", strings.Join(names, ","), "--no-tag-output", "--", "readlink", "/proc/self/ns/net")
	var want []string
	for _, h := range hosts {
		want = append(want, h.netns)
	}
	got := strings.Fields(r.stdout)
	if r.code != 0 || !sameSet(got, want) {
		nw.t.Fatalf("job on %v: exit %d, ran in %v, want %v; stderr:\n%s", names, r.code, got, want, r.stderr)
	}
}

func sameSet(a, b []string) bool {
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, c := range count {
		if c != 0 {
			return false
		}
	}
	return true
}

// listsNode reports whether `launcher nodes` names node name as alive:
// listed, and not shown dead or left.
func (nw *network) listsNode(name string) (bool, string) {
	nw.t.Helper()
	r := nw.run("nodes")
	if r.code != 0 {
		nw.t.Fatalf("nodes: exit %d: %s", r.code, r.stderr)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == name {
			return !strings.Contains(l, " dead") && !strings.Contains(l, " left"), r.stdout
		}
	}
	return false, r.stdout
}

// cut takes h's link down, as a pulled cable; heal brings it up.
func (nw *network) cut(h *host)  { nw.ipCmd("-n", h.ns, "link", "set", "dev", "eth0", "down") }
func (nw *network) heal(h *host) { nw.ipCmd("-n", h.ns, "link", "set", "dev", "eth0", "up") }

// dropAll drops every packet to and from h's link, as a firewall would,
// with the link up; acceptAll undoes it.
func (nw *network) dropAll(h *host)   { nw.iptables(h, "-I") }
func (nw *network) acceptAll(h *host) { nw.iptables(h, "-D") }

func (nw *network) iptables(h *host, op string) {
	nw.t.Helper()
	nw.dropRules(h, op, []string{"INPUT", "-i", "eth0"}, []string{"OUTPUT", "-o", "eth0"})
}

// block drops, on h, every packet to and from ip (op -I), or stops
// dropping them (op -D).
func (nw *network) block(h *host, ip, op string) {
	nw.t.Helper()
	nw.dropRules(h, op, []string{"INPUT", "-s", ip}, []string{"OUTPUT", "-d", ip})
}

// dropRules inserts (-I) or deletes (-D) DROP rules in h's firewall.
func (nw *network) dropRules(h *host, op string, rules ...[]string) {
	nw.t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		nw.t.Skip("needs iptables")
	}
	for _, rule := range rules {
		args := append(append([]string{"netns", "exec", h.ns, "iptables", "-w", op}, rule...), "-j", "DROP")
		nw.ipCmd(args...)
	}
}

// kill9 kills an agent with SIGKILL and reaps it.
func kill9(t testing.TB, a *agent) {
	t.Helper()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
}

// runAgentIn runs an agent on h expecting it to exit by itself.
func (nw *network) runAgentIn(h *host, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args = append([]string{"netns", "exec", h.ns, agentBin}, args...)
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Env = agentEnv("TMPDIR=" + nw.dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
