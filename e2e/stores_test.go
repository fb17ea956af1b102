package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
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

// replicaRow is a row of `launcher stores -o json`.
type replicaRow struct {
	Address string `json:"address"`
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Error   string `json:"error"`
}

// replicaAgents are three agents on loopback, each hosting a replica of
// one store.
type replicaAgents struct {
	addrs []string
	cmds  map[string]*exec.Cmd // by store address
	env   []string             // the launchers' extra environment: the cluster token
}

// startReplicas starts three replica agents, each with its own data
// directory and socket, authenticated with a token of the test's own.
func startReplicas(t *testing.T) *replicaAgents {
	t.Helper()
	token := fmt.Sprintf("MUSTER_TOKEN=stores-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())
	r := &replicaAgents{cmds: map[string]*exec.Cmd{}, env: []string{token}}
	for _, p := range replicaPorts(t, 3) {
		r.addrs = append(r.addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	for i, addr := range r.addrs {
		r.start(t, addr, "replica"+strconv.Itoa(i), strings.Join(r.addrs, ","))
	}
	return r
}

// start starts the agent hosting the replica at addr, one of peers.
func (r *replicaAgents) start(t *testing.T, addr, name, peers string, args ...string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(agentBin, append([]string{"--listen", addr, "--store-peers", peers, "--data-dir", filepath.Join(dir, "data"),
		"--socket", filepath.Join(dir, "agent.sock"), "--name", name, "--rank-logs", filepath.Join(dir, "rank-logs")}, args...)...)
	cmd.Env = agentEnv(r.env...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s, log:\n%s", addr, tail(errb.String(), 4000))
		}
	})
	stopAtCleanup(t, cmd, "agent "+addr, errb.String)
	r.cmds[addr] = cmd
}

// replicaPorts are n free loopback ports whose next port is free too:
// raft uses it.
func replicaPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(ports) < n {
		// Below the kernel's ephemeral range (32768 on): no other test's
		// port 0 listener or outgoing connection takes it meanwhile.
		p := 10000 + rand.IntN(22000)
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		held = append(held, a)
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		if err != nil {
			continue
		}
		held = append(held, b)
		ports = append(ports, p)
	}
	return ports
}

// stores runs `launcher stores --cluster ... -o json` and reads its rows.
func (r *replicaAgents) stores(t *testing.T, cluster []string) (result, []replicaRow) {
	t.Helper()
	cmd, out, errb := launcher(t, r.env, "stores", "--cluster", strings.Join(cluster, ","), "-o", "json")
	res := wait(t, cmd, out, errb)
	var list struct {
		Items []replicaRow `json:"items"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil {
		t.Fatalf("launcher stores: %v (exit %d)\nstdout:\n%s\nstderr:\n%s", err, res.code, res.stdout, res.stderr)
	}
	return res, list.Items
}

// roles counts the rows of each role, and gives the leaders' addresses.
func roles(rows []replicaRow) (map[string]int, []string) {
	n := map[string]int{}
	var leaders []string
	for _, row := range rows {
		n[row.Role]++
		if row.Role == "leader" {
			leaders = append(leaders, row.Address)
		}
	}
	return n, leaders
}

// waitRegistered waits until the replicas' agents are registered with
// the store: an agent whose registration is cut short by a leader's loss
// exits (agent/agent.go), which is not what these tests are about.
func (r *replicaAgents) waitRegistered(t *testing.T) {
	t.Helper()
	testwait.Until(t, 30*time.Second, "the replicas' agents registered", func() bool {
		res := runLauncherEnv(t, r.env, "nodes", "--cluster", strings.Join(r.addrs, ","), "-o", "json")
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		return res.code == 0 && json.Unmarshal([]byte(res.stdout), &list) == nil && len(list.Items) == len(r.addrs)
	})
}

// Three replicas elect one leader, which `launcher stores` lists with two
// followers of its term; once the leader's agent is killed, it is listed
// unreachable and another replica leads.
func TestStores(t *testing.T) {
	t.Parallel()
	r := startReplicas(t)
	var rows []replicaRow
	var last result
	testwait.Until(t, 30*time.Second, "one leader and two followers of one term", func() bool {
		last, rows = r.stores(t, r.addrs)
		n, _ := roles(rows)
		return len(rows) == 3 && n["leader"] == 1 && n["follower"] == 2 && last.code == 0 &&
			rows[0].Term == rows[1].Term && rows[1].Term == rows[2].Term
	})
	if !slices.IsSortedFunc(rows, func(a, b replicaRow) int { return strings.Compare(a.Address, b.Address) }) {
		t.Errorf("rows not sorted by address: %+v", rows)
	}
	r.waitRegistered(t)
	_, rows = r.stores(t, r.addrs)
	_, leaders := roles(rows)
	if len(leaders) != 1 {
		t.Fatalf("leaders %v", leaders)
	}
	old := leaders[0]
	// The table lists the same replicas, with the leader's last contact 0s.
	table := runLauncherEnv(t, r.env, "stores", "--cluster", strings.Join(r.addrs, ","))
	if table.code != 0 || !strings.HasPrefix(table.stdout, "ADDRESS") || !strings.Contains(table.stdout, "leader") {
		t.Errorf("table: exit %d\n%s%s", table.code, table.stdout, table.stderr)
	}

	if err := r.cmds[old].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the old leader unreachable and another leading", func() bool {
		last, rows = r.stores(t, r.addrs)
		n, leaders := roles(rows)
		return len(rows) == 3 && n["unreachable"] == 1 && len(leaders) == 1 && leaders[0] != old && last.code == 0
	})
	for _, row := range rows {
		if row.Address == old && (row.Role != "unreachable" || row.Error == "") {
			t.Errorf("the killed leader's row: %+v", row)
		}
	}

	// Named alone, a follower leads the command to the others: the
	// configuration lists them.
	for _, addr := range r.addrs {
		if addr == old {
			continue
		}
		if _, rows := r.stores(t, []string{addr}); len(rows) != 3 {
			t.Errorf("--cluster %s lists %+v, want the 3 replicas", addr, rows)
		}
	}

	// The dead replica is replaced, through the leader: removed, and a new
	// one added, which follows the leader once it caught up.
	rm := runLauncherEnv(t, r.env, "stores", "remove", old, "--cluster", strings.Join(r.addrs, ","))
	if rm.code != 0 || !strings.Contains(rm.stdout, "replica "+old+" removed") || strings.Count(rm.stdout, "127.0.0.1:") != 3 {
		t.Fatalf("stores remove: exit %d\n%s%s", rm.code, rm.stdout, rm.stderr)
	}
	var live []string
	for _, a := range r.addrs {
		if a != old {
			live = append(live, a)
		}
	}
	added := "127.0.0.1:" + strconv.Itoa(replicaPorts(t, 1)[0])
	r.start(t, added, "replica3", strings.Join(append(slices.Clone(live), added), ","), "--store-join")
	add := runLauncherEnv(t, r.env, "stores", "add", added, "--cluster", strings.Join(live, ","))
	if add.code != 0 || !strings.Contains(add.stdout, "replica "+added+" added") || strings.Count(add.stdout, "127.0.0.1:") != 4 {
		t.Fatalf("stores add: exit %d\n%s%s", add.code, add.stdout, add.stderr)
	}
	testwait.Until(t, 10*time.Second, "the added replica following", func() bool {
		last, rows = r.stores(t, live)
		n, _ := roles(rows)
		return len(rows) == 3 && n["leader"] == 1 && n["follower"] == 2 && slices.ContainsFunc(rows, func(row replicaRow) bool {
			return row.Address == added && row.Term == rows[0].Term
		})
	})
}

// No replica leads while only one of three runs: `launcher stores` lists
// the others unreachable, says so, and exits 1.
func TestStoresNoLeader(t *testing.T) {
	t.Parallel()
	r := startReplicas(t)
	var rows []replicaRow
	testwait.Until(t, 30*time.Second, "a leader", func() bool {
		_, rows = r.stores(t, r.addrs)
		_, leaders := roles(rows)
		return len(leaders) == 1
	})
	r.waitRegistered(t)
	for _, addr := range r.addrs[1:] {
		r.cmds[addr].Process.Signal(syscall.SIGKILL)
	}
	var last result
	testwait.Until(t, 10*time.Second, "no leader", func() bool {
		last, rows = r.stores(t, r.addrs)
		n, _ := roles(rows)
		return n["unreachable"] == 2 && n["leader"] == 0
	})
	if last.code != 1 || !strings.Contains(last.stderr, "no replica leads: ") || !strings.Contains(last.stderr, r.addrs[1]+" unreachable") {
		t.Errorf("exit %d, stderr:\n%s", last.code, last.stderr)
	}
}

// A store that is not replicated lists its one row, role single.
func TestStoresSingle(t *testing.T) {
	t.Parallel()
	addr := startAgent(t)
	res := runLauncher(t, "stores", "--cluster", addr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], addr) || !strings.Contains(lines[1], " single ") {
		t.Errorf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = runLauncher(t, "stores", "add", "127.0.0.1:1", "--cluster", addr)
	if res.code != 1 || !strings.Contains(res.stderr, "stores add 127.0.0.1:1: this store is not replicated") {
		t.Errorf("stores add on a lone store: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// stores add and remove name one HOST:PORT: anything else is a usage
// error naming the argument, before any store is asked.
func TestStoresUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stores", "add", "nohost"}, `"nohost": want HOST:PORT`},
		{[]string{"stores", "remove", "10.0.0.1:65535"}, `"10.0.0.1:65535": want HOST:PORT`},
		{[]string{"stores", "remove", ":29400"}, `":29400": want HOST:PORT`},
		{[]string{"stores", "add"}, "name one replica as HOST:PORT"},
		{[]string{"stores", "add", "a:1", "b:1"}, "name one replica as HOST:PORT"},
		{[]string{"stores", "list"}, `unknown stores command "list"`},
		{[]string{"stores", "-o", "xml", "--cluster", "127.0.0.1:1"}, "unknown format"},
	} {
		res := runLauncher(t, tt.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, res.code, res.stderr, tt.want)
		}
	}
}

// runLauncherEnv is runLauncher with env added to the launcher's
// environment.
func runLauncherEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd, out, errb := launcher(t, env, args...)
	return wait(t, cmd, out, errb)
}
