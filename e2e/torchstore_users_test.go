package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A job's TCPStore is its own: from another host only the job's nodes
// reach it, and on its node only processes of the job's user.
func TestNetnsTorchStoreServesOnlyItsJob(t *testing.T) {
	t.Parallel()
	probe := testProgram(t, "storeprobe")
	nw := newNetwork(t, 3)
	nw.startCluster()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-torchstore-users", time.Now().UnixNano())
	args := []string{"netns", "exec", nw.hosts[0].ns, launcherBin, "run", "--cluster", nw.store(), "--token-file", nw.token,
		"--tls-ca", nw.ca, "-H", "a,b", "--no-tag-output", "-x", marker, "--", "sh", "-c",
		`[ "$RANK" = 0 ] && echo "$MASTER_ADDR $MASTER_PORT"; exec sleep 1000`}
	lines := startLines(t, exec.Command("ip", args...))
	var addr string
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("rank 0 printed %q", line)
		}
		addr = net.JoinHostPort(f[0], f[1])
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}
	for _, tt := range []struct {
		name string
		host string
		as   []string // setpriv's arguments, or none to run as root
		ok   bool
	}{
		{"the job's user on its node", "a", nil, true},
		{"another node of the job", "b", nil, true},
		{"a host that is not the job's", "c", nil, false},
		{"another user on the job's node", "a", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			argv := append(append([]string{"netns", "exec", nw.host(tt.host).ns}, tt.as...), probe, addr)
			out, err := exec.Command("ip", argv...).CombinedOutput()
			// Refused is the store closing the connection, not a probe that could not run.
			want := "ok\n"
			if !tt.ok {
				want = "refused: "
			}
			if !strings.HasPrefix(string(out), want) {
				t.Fatalf("from %s: %v %q, want %q", tt.host, err, out, want)
			}
		})
	}
}

// Another user on one of the job's nodes other than the store's reaches
// the job's node by address but is not the job's user: its agent says so
// when the store's agent asks, and the store refuses it. The job's own
// ranks, and the job's user, on both nodes still read and write it.
func TestNetnsTorchStoreRefusesOtherUsersOfItsNodes(t *testing.T) {
	t.Parallel()
	probe := testProgram(t, "storeprobe")
	nw := newNetwork(t, 3)
	agents := nw.startCluster()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-torchstore-peers", time.Now().UnixNano())
	// Each rank writes a key of its own, as ranks do when they join.
	script := `out=$("$PROBE" "$MASTER_ADDR:$MASTER_PORT" set "rank$RANK" "from-$RANK" 2>&1); ` +
		`echo "rank $RANK $out $MASTER_ADDR $MASTER_PORT"; exec sleep 1000`
	args := []string{"netns", "exec", nw.hosts[0].ns, launcherBin, "run", "--cluster", nw.store(), "--token-file", nw.token,
		"--tls-ca", nw.ca, "-H", "a,b", "--no-tag-output", "-x", marker, "-x", "PROBE=" + probe, "--", "sh", "-c", script}
	lines := startLines(t, exec.Command("ip", args...))
	var addr string
	for range 2 {
		select {
		case line := <-lines:
			// rank N ok ADDR PORT
			f := strings.Fields(line)
			if len(f) != 5 || f[0] != "rank" || f[2] != "ok" {
				t.Fatalf("a rank of the job could not use its store: %q", line)
			}
			addr = net.JoinHostPort(f[3], f[4])
		case <-time.After(30 * time.Second):
			t.Fatal("the job's ranks did not report")
		}
	}
	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
	storeCmd := func(host string, as []string, args ...string) string {
		argv := append(append(append([]string{"netns", "exec", nw.host(host).ns}, as...), probe, addr), args...)
		out, _ := exec.Command("ip", argv...).CombinedOutput()
		return string(out)
	}
	for _, tt := range []struct {
		name string
		host string
		as   []string // setpriv's arguments, or none to run as root
		args []string
		want string // the output's start
	}{
		{"the job's user sets a key on the store's node", "a", nil, []string{"set", "secret", "root-secret-123"}, "ok\n"},
		{"the job's user reads it on the other node", "b", nil, []string{"get", "secret"}, "ok root-secret-123\n"},
		{"another user on the other node cannot read it", "b", nobody, []string{"get", "secret"}, "refused: "},
		{"another user on the other node cannot write it", "b", nobody, []string{"set", "secret", "nobody-was-here"}, "refused: "},
		{"another user on the store's node cannot read it", "a", nobody, []string{"get", "secret"}, "refused: "},
		{"the job's user on a host that is not the job's cannot read it", "c", nil, []string{"get", "secret"}, "refused: "},
		{"the value is still the job's", "a", nil, []string{"get", "secret"}, "ok root-secret-123\n"},
		{"the rank on the store's node wrote its key", "b", nil, []string{"get", "rank0"}, "ok from-0\n"},
		{"the rank on the other node wrote its key", "a", nil, []string{"get", "rank1"}, "ok from-1\n"},
	} {
		if out := storeCmd(tt.host, tt.as, tt.args...); !strings.HasPrefix(out, tt.want) {
			t.Fatalf("%s: from %s: %q, want %q", tt.name, tt.host, out, tt.want)
		}
	}
	// The store's agent logs the first refusal, with node b's word.
	if log := agents["a"].logText(); !strings.Contains(log, "node b: a process of uid 65534, not of the job's user (uid 0)") {
		t.Fatalf("agent a's log does not say why it refused:\n%s", log)
	}
}

// Another user's job across two nodes: its ranks, and that user, reach its
// store from both; root, on either node, does not: on the node that does
// not serve it, that node's agent judges by the job's user, not its own.
func TestNetnsTorchStoreOfAnotherUsersJob(t *testing.T) {
	t.Parallel()
	needOtherUser(t)
	probe := testProgram(t, "storeprobe")
	nw := newNetwork(t, 2)
	// The store's socket, where nobody's launcher submits as nobody.
	sockDir, err := os.MkdirTemp("", "muster-e2e-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	os.Chmod(sockDir, 0o755)
	sock := filepath.Join(sockDir, "store.sock")
	a := nw.startAgent(nw.hosts[0], "a", "--listen", nw.store(), "--token-file", nw.token,
		"--tls-cert", filepath.Join(nw.dir, "store.pem"), "--tls-key", filepath.Join(nw.dir, "store-key.pem"),
		"--tls-ca", nw.ca, "--socket", sock)
	b := nw.join(nw.hosts[1], nw.token)
	nw.stopTogetherAtCleanup([]*agent{a, b})
	nw.waitReady(2, 20*time.Second)

	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
	script := `out=$("$PROBE" "$MASTER_ADDR:$MASTER_PORT" set "rank$RANK" "from-$RANK" 2>&1); ` +
		`echo "rank $RANK $(id -u) $out $MASTER_ADDR $MASTER_PORT"; exec sleep 1000`
	args := append(append([]string{"netns", "exec", nw.hosts[0].ns}, nobody...), launcherBin, "run", "--cluster", "unix://"+sock,
		"-H", "a,b", "--no-tag-output", "-x", "PROBE="+probe, "--", "sh", "-c", script)
	cmd := exec.Command("ip", args...)
	cmd.Dir = "/"
	var errb strings.Builder
	cmd.Stderr = &errb
	lines := startLines(t, cmd)
	var addr string
	for range 2 {
		select {
		case line := <-lines:
			// rank N 65534 ok ADDR PORT
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "rank" || f[2] != "65534" || f[3] != "ok" {
				t.Fatalf("a rank of nobody's job could not use its store: %q", line)
			}
			addr = net.JoinHostPort(f[4], f[5])
		case <-time.After(30 * time.Second):
			t.Fatalf("the job's ranks did not report; launcher's stderr:\n%s", errb.String())
		}
	}
	for _, tt := range []struct {
		name string
		host string
		as   []string
		args []string
		want string
	}{
		{"the job's user sets a key on the other node", "b", nobody, []string{"set", "secret", "nobodys-secret"}, "ok\n"},
		{"the job's user reads it on the store's node", "a", nobody, []string{"get", "secret"}, "ok nobodys-secret\n"},
		{"root on the other node cannot read it", "b", nil, []string{"get", "secret"}, "refused: "},
		{"root on the store's node cannot read it", "a", nil, []string{"get", "secret"}, "refused: "},
		{"the other node's rank wrote its key", "a", nobody, []string{"get", "rank1"}, "ok from-1\n"},
	} {
		argv := append(append(append([]string{"netns", "exec", nw.host(tt.host).ns}, tt.as...), probe, addr), tt.args...)
		c := exec.Command("ip", argv...)
		c.Dir = "/"
		out, _ := c.CombinedOutput()
		if !strings.HasPrefix(string(out), tt.want) {
			t.Fatalf("%s: from %s: %q, want %q", tt.name, tt.host, out, tt.want)
		}
	}
	if log := a.logText(); !strings.Contains(log, "node b: a process of uid 0, not of the job's user (uid 65534)") {
		t.Fatalf("agent a's log does not say why it refused root on node b:\n%s", log)
	}
}

// Ranks of three nodes join on the store as torch's do, 64 a node at once:
// the 128 of the two nodes that do not serve it are each asked about, and
// all get in.
func TestNetnsTorchStoreRanksOfThreeNodes(t *testing.T) {
	t.Parallel()
	worker := testProgram(t, "torchclient")
	nw := newNetwork(t, 3)
	agents := nw.startCluster()
	r := nw.run("run", "-H", "a,b,c", "--nproc", "64", "--", worker)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	lines := torchLines(t, r.stdout)
	ids, joined := map[string]bool{}, map[string]bool{}
	for _, l := range lines {
		ids[l.id], joined[l.joined] = true, true
	}
	if len(lines) != 192 || len(ids) != 1 || len(joined) != 192 {
		t.Fatalf("%d ranks reported, %d unique IDs, %d distinct join counts; want 192, 1, 192", len(lines), len(ids), len(joined))
	}
	if log := agents["a"].logText(); strings.Contains(log, "TCPStore connection refused") {
		t.Fatalf("agent a refused a rank:\n%s", log)
	}
}

// startLines starts cmd, stopped at the test's end, and hands on its
// output's lines as they come.
func startLines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	return lines
}
