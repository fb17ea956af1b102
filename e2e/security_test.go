package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// needOtherUser skips a test that runs commands as nobody (65534).
func needOtherUser(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run commands as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv")
	}
	// Let nobody run the binaries the tests built.
	os.Chmod(filepath.Dir(launcherBin), 0o755)
}

// asNobody runs the launcher as nobody with the groups setpriv is given
// ("--clear-groups", or "--groups=100").
func asNobody(t *testing.T, groups string, args ...string) result {
	return asNobodyEnv(t, nil, groups, args...)
}

// asNobodyEnv is asNobody with env added to the launcher's environment.
func asNobodyEnv(t *testing.T, env []string, groups string, args ...string) result {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", groups, launcherBin}, args...)...)
	cmd.Dir = "/"
	// Not the test's own token: nobody cannot read it.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MUSTER_TOKEN") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return wait(t, cmd, &out, &errb)
}

// listening lists what process pid accepts connections on: TCP addresses
// (as 127.0.0.1:PORT or [::1]:PORT) and Unix socket paths.
func listening(t *testing.T, pid int) (tcp, unix []string) {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	for file, host := range map[string]string{"tcp": "127.0.0.1", "tcp6": "::1"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			_, portHex, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseUint(portHex, 16, 16)
			tcp = append(tcp, fmt.Sprintf("%s:%d", host, port))
			if host == "::1" {
				tcp[len(tcp)-1] = fmt.Sprintf("[::1]:%d", port)
			}
		}
	}
	b, _ := os.ReadFile("/proc/net/unix")
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 8 && inodes[f[6]] && strings.HasPrefix(f[7], "/") {
			unix = append(unix, f[7])
		}
	}
	return tcp, unix
}

func TestEmbeddedDefaultServesOnlyItsOwnUser(t *testing.T) {
	t.Parallel()
	needOtherUser(t)
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-embedded", time.Now().UnixNano())
	cmd, out, errb := launcher(t, nil, "run", "--nproc", "1", "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "the worker", func() bool { return len(jobProcesses(t, marker)) == 1 })
	tcp, socks := listening(t, cmd.Process.Pid)
	if len(tcp)+len(socks) == 0 {
		t.Fatal("the embedded launcher listens on nothing; the test would prove nothing")
	}
	for _, addr := range append(tcp, socks...) {
		r := asNobody(t, "--clear-groups", "run", "--cluster", addr, "--", "id")
		if r.code == 0 || strings.Contains(r.stdout, "uid=") {
			t.Errorf("nobody ran a command through the embedded launcher at %s: exit %d\n%s%s", addr, r.code, r.stdout, r.stderr)
		}
	}
	for _, path := range socks {
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("socket %s is in a directory of mode %v, want 0700", path, fi.Mode().Perm())
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	wait(t, cmd, out, errb)
	for _, path := range socks {
		if _, err := os.Stat(filepath.Dir(path)); err == nil {
			t.Errorf("the embedded store's directory %s outlived the launcher", filepath.Dir(path))
		}
	}
}

func TestAgentRunsOtherUsersJobsAsThem(t *testing.T) {
	t.Parallel()
	needOtherUser(t)
	// A token file of its own, which the agent makes.
	tok := filepath.Join(t.TempDir(), "token")
	ag := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--token-file", tok}, "--token-file", tok)
	sock := "unix://" + ag.socket

	// Loopback is no boundary: over TCP nobody needs the token they cannot read.
	r := asNobody(t, "--clear-groups", "run", "--cluster", ag.addr, "--", "id")
	if r.code == 0 || strings.Contains(r.stdout, "uid=") || !strings.Contains(r.stderr, "missing or wrong cluster token") {
		t.Fatalf("nobody over TCP without the token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The token file the agent made is its user's alone.
	if fi, err := os.Stat(tok); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v; want mode 0600", fi, err)
	}
	// On the socket the kernel names the user, and the job runs as them.
	r = asNobody(t, "--groups=100", "run", "--cluster", sock, "--no-tag-output", "--", "sh", "-c", "id -u; id -G")
	if r.code != 0 || r.stdout != "65534\n65534 100\n" {
		t.Fatalf("nobody's job on the socket: exit %d, stdout %q, stderr %q; want uid 65534 with groups 65534 100", r.code, r.stdout, r.stderr)
	}
	// A user cannot have muster write where they cannot.
	private := t.TempDir()
	r = asNobody(t, "--clear-groups", "run", "--cluster", sock, "--log-dir", filepath.Join(private, "logs"), "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("nobody's --log-dir in root's directory: exit %d, stderr %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(private); len(entries) != 0 {
		t.Fatalf("muster wrote into root's directory for nobody: %v", entries)
	}
	// The token holder is the cluster operator; their jobs run as the agent's user.
	r = runLauncher(t, "run", "--cluster", ag.addr, "--token-file", tok, "--no-tag-output", "--", "id", "-u")
	if r.code != 0 || r.stdout != "0\n" {
		t.Fatalf("operator's job: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	// nobody sees and stops only their own jobs.
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-root-job", time.Now().UnixNano())
	cmd, out, errb := launcher(t, nil, "run", "--cluster", ag.addr, "--token-file", tok, "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "root's job", func() bool { return len(jobProcesses(t, marker)) == 1 })
	jobs := runLauncher(t, "jobs", "--cluster", ag.addr, "--token-file", tok)
	var rootJob string
	for _, l := range strings.Split(jobs.stdout, "\n") {
		if strings.Contains(l, "sleep 1000") {
			rootJob = strings.Fields(l)[0]
		}
	}
	if theirs := asNobody(t, "--clear-groups", "jobs", "--cluster", sock); theirs.code != 0 || strings.Contains(theirs.stdout, rootJob) {
		t.Errorf("nobody's job list shows root's job %s: %q %q", rootJob, theirs.stdout, theirs.stderr)
	}
	if c := asNobody(t, "--clear-groups", "cancel", "--cluster", sock, rootJob); c.code == 0 || !strings.Contains(c.stderr, "belongs to another user") {
		t.Errorf("nobody cancelled root's job: exit %d %q", c.code, c.stderr)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	wait(t, cmd, out, errb)
}

func TestLauncherFindsTheLocalAgentSocket(t *testing.T) {
	t.Parallel()
	needOtherUser(t)
	ag := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), nil)
	r := runLauncher(t, "nodes", "--cluster", ag.socket)
	if r.code != 0 || !strings.Contains(r.stdout, "127.0.0.1") {
		t.Fatalf("nodes through the socket's path: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Without --cluster a user's launcher takes the agent's socket under
	// $XDG_RUNTIME_DIR (then /run/muster) over the embedded default.
	r = asNobodyEnv(t, []string{"MUSTER_SOCKET=", "XDG_RUNTIME_DIR=" + ag.dir}, "--clear-groups", "run", "--no-tag-output", "--", "sh", "-c", `echo "$(id -u) $MUSTER_STORE_ADDR"`)
	if r.code != 0 || r.stdout != "65534 "+ag.addr+"\n" {
		t.Fatalf("run without --cluster: exit %d, stdout %q, stderr %q; want it run by the agent at %s", r.code, r.stdout, r.stderr, ag.addr)
	}
}

// A launcher without --cluster takes the agent serving $MUSTER_SOCKET and
// no other. The tests' own MUSTER_SOCKET names a path where nothing serves,
// so that no test reaches an agent it did not start, such as a root agent
// on /run/muster/agent.sock: their launchers run the embedded default.
func TestLauncherTakesOnlyTheAgentOfMusterSocket(t *testing.T) {
	t.Parallel()
	ag := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), nil)
	show := []string{"run", "--no-tag-output", "--", "sh", "-c", `echo "$MUSTER_STORE_ADDR"`}
	cmd, out, errb := launcher(t, []string{"MUSTER_SOCKET=" + ag.socket}, show...)
	if r := wait(t, cmd, out, errb); r.code != 0 || r.stdout != ag.addr+"\n" {
		t.Fatalf("with MUSTER_SOCKET=%s: exit %d, stdout %q, stderr %q; want the job run by the agent at %s", ag.socket, r.code, r.stdout, r.stderr, ag.addr)
	}
	if got := os.Getenv("MUSTER_SOCKET"); got != noAgentSocket {
		t.Fatalf("the tests' MUSTER_SOCKET is %q, want %q", got, noAgentSocket)
	}
	r := runLauncher(t, show...)
	// The embedded default's store: a socket in a private directory of the launcher's.
	if embedded, ok := strings.CutPrefix(strings.TrimSpace(r.stdout), "unix://"); r.code != 0 || !ok || !strings.HasPrefix(embedded, os.TempDir()) {
		t.Fatalf("the tests' launcher: exit %d, stdout %q, stderr %q; want the embedded default's store", r.code, r.stdout, r.stderr)
	}
}

func TestTokenMinimumLengthInBothBinaries(t *testing.T) {
	t.Parallel()
	const want = "MUSTER_TOKEN: token is 1 characters, want at least 16"
	cmd, out, errb := launcher(t, []string{"MUSTER_TOKEN=x"}, "run", "--cluster", "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), "--", "true")
	if r := wait(t, cmd, out, errb); r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("launcher with MUSTER_TOKEN=x: exit %d, %q", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	agent := exec.CommandContext(ctx, agentBin, "--listen", "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), "--socket", filepath.Join(t.TempDir(), "a.sock"))
	agent.Env = agentEnv("MUSTER_TOKEN=x")
	b, err := agent.CombinedOutput()
	if err == nil || !strings.Contains(string(b), want) {
		t.Errorf("agent with MUSTER_TOKEN=x: %v\n%s", err, b)
	}
}

func TestWorkersUseTheirJobsKV(t *testing.T) {
	t.Parallel()
	worker := testProgram(t, "kvworker")
	for _, tt := range []struct {
		name    string
		cluster func(t *testing.T) []string
	}{
		{"embedded default", func(*testing.T) []string { return nil }},
		{"cluster with a token", func(t *testing.T) []string { return []string{"--cluster", startAgent(t)} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"run"}, tt.cluster(t)...), "--nproc", "3", "--no-tag-output", "--", worker)
			r := runLauncher(t, args...)
			if r.code != 0 || r.stdout != strings.Repeat("kv v0,v1,v2\n", 3) {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

func TestAgentListensOnHostNamesAndEveryAddress(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(testfixture.FreePort(t))
	startAgentAt(t, "localhost:"+port, nil)
	if r := runLauncher(t, "run", "--cluster", "127.0.0.1:"+port, "--", "echo", "ok"); r.code != 0 || r.stdout != "[0] ok\n" {
		t.Fatalf("--listen localhost: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	dir := t.TempDir()
	if r := runLauncher(t, "certs", "--dir", dir, "127.0.0.1"); r.code != 0 {
		t.Fatalf("certs: %s", r.stderr)
	}
	ca := filepath.Join(dir, "ca.pem")
	// Every address means gossip too; a free port keeps it off another agent's 7946.
	tls := []string{"--tls-cert", filepath.Join(dir, "store.pem"), "--tls-key", filepath.Join(dir, "store-key.pem"),
		"--bind", "0.0.0.0:" + strconv.Itoa(testfixture.FreePort(t))}
	port = strconv.Itoa(testfixture.FreePort(t))
	startAgentAt(t, "0.0.0.0:"+port, tls, "--tls-ca", ca)
	if r := runLauncher(t, "run", "--cluster", "127.0.0.1:"+port, "--tls-ca", ca, "--", "echo", "ok"); r.code != 0 || r.stdout != "[0] ok\n" {
		t.Fatalf("--listen 0.0.0.0: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// The token would cross the network in clear text: refused.
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600)
	if out, err := runAgentOnce(t, "--listen", "0.0.0.0:0", "--token-file", tok); err == nil || !strings.Contains(out, "refusing to listen on 0.0.0.0:0 without TLS") {
		t.Fatalf("0.0.0.0 with a token and no TLS: %v\n%s", err, out)
	}
}

// launcher certs into a new directory leaves the certificates readable by
// every user, whose workers read the CA through MUSTER_TLS_CA, and the keys
// by their owner alone.
func TestCertsReadableByOtherUsers(t *testing.T) {
	t.Parallel()
	needOtherUser(t)
	base, err := os.MkdirTemp("", "muster-e2e-certs-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "etc", "muster")
	if r := runLauncher(t, "certs", "--dir", dir, "127.0.0.1"); r.code != 0 {
		t.Fatalf("certs: %s", r.stderr)
	}
	for _, tc := range []struct {
		file     string
		readable bool
	}{
		{"ca.pem", true},
		{"store.pem", true},
		{"ca-key.pem", false},
		{"store-key.pem", false},
	} {
		out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", filepath.Join(dir, tc.file)).CombinedOutput()
		if got := err == nil; got != tc.readable {
			t.Errorf("%s read by uid 65534: %v, want readable %v: %s", tc.file, err, tc.readable, out)
		}
	}
}
