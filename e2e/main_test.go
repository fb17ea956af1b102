// Package e2e runs the real launcher and agent binaries as a user would and
// checks what they do to real processes.
package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

var launcherBin, agentBin string

// noAgentSocket is MUSTER_SOCKET for every binary the tests start: the only
// socket a launcher without --cluster looks at, where no agent can serve
// (its directory is a file), so it runs the embedded default.
var noAgentSocket string

func TestMain(m *testing.M) {
	// The tests mostly wait for processes: run more of them at once than
	// there are CPUs, unless -parallel says otherwise.
	flag.Parse()
	if testing.Short() {
		// The quick loop: these tests run whole binaries, clusters and
		// network namespaces, two thirds of the suite's time.
		fmt.Println("e2e: skipped with -short")
		os.Exit(0)
	}
	if !flagGiven("test.parallel") {
		flag.Set("test.parallel", strconv.Itoa(max(8, 2*runtime.NumCPU())))
	}
	dir, err := os.MkdirTemp("", "muster-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := isolate(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	launcherBin = filepath.Join(dir, "launcher")
	agentBin = filepath.Join(dir, "agent")
	// One go build for both, which links them at once: dir/launcher and
	// dir/agent, named after their packages.
	if out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../cmd/launcher", "../cmd/agent").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ../cmd/launcher ../cmd/agent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := testfixture.CheckNoneLeft(m.Run, 10*time.Second)
	os.RemoveAll(dir)
	os.Exit(code)
}

// timed is held by each test timed against a node or hang timeout while it
// runs: two at once, each a cluster of processes, starve each other's
// heartbeats past those timeouts on a two-CPU machine. Lighter tests still
// run beside the one that holds it.
var timed = make(chan struct{}, 1)

// timedAlone makes t wait for timed, and hold it until t ends. Benchmarks
// run one at a time already.
func timedAlone(t testing.TB) {
	t.Helper()
	if _, ok := t.(*testing.T); !ok {
		return
	}
	timed <- struct{}{}
	t.Cleanup(func() { <-timed })
}

func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// isolate keeps the tests away from every agent they did not start: an
// agent serving this machine's socket (/run/muster/agent.sock, or this
// user's) and a cluster the caller's MUSTER_CLUSTER or token names. It
// drops the caller's MUSTER_ variables (except the tests' own knobs),
// points MUSTER_SOCKET where nothing serves, and gives the agents the tests
// start one token file of the tests' own.
func isolate(dir string) error {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MUSTER_") && !strings.HasPrefix(k, "MUSTER_E2E_") && k != "MUSTER_NODELOSS_TRIALS" && k != "MUSTER_CUT_SIZES" {
			os.Unsetenv(k)
		}
	}
	notDir := filepath.Join(dir, "no-agent")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		return err
	}
	noAgentSocket = filepath.Join(notDir, "agent.sock")
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(fmt.Sprintf("e2e-%d-%d\n", os.Getpid(), time.Now().UnixNano())), 0o600); err != nil {
		return err
	}
	os.Setenv("MUSTER_SOCKET", noAgentSocket)
	// The agents' kept output stays with the tests' other files.
	os.Setenv("MUSTER_RANK_LOGS", filepath.Join(dir, "rank-logs"))
	os.Setenv("MUSTER_TOKEN_FILE", token)
	// Agents keep their store's job history in memory unless a test gives
	// them a --data-dir: none shares this machine's /var/lib/muster.
	os.Setenv("MUSTER_DATA_DIR", "")
	pointUCXAtLoopback()
	return nil
}

// agentEnv is the environment of an agent a test starts, with env added:
// the tests' own, less MUSTER_SOCKET, which is for launchers; an agent would
// take it for its own --socket.
func agentEnv(env ...string) []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MUSTER_SOCKET=") {
			e = append(e, kv)
		}
	}
	return append(e, env...)
}

// result is what a finished launcher left.
type result struct {
	code           int
	stdout, stderr string
}

// launcher starts the launcher with args; the caller waits on it.
func launcher(t *testing.T, env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(launcherBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &out, &errb
}

// hangAfter bounds how long a launcher may take.
const hangAfter = 60 * time.Second

// wait bounds how long a launcher may take: a hang fails the test, showing
// the processes it left and, from SIGQUIT, the Go launcher's goroutines.
func wait(t testing.TB, cmd *exec.Cmd, out, errb *bytes.Buffer) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(hangAfter):
		tree := processTree(cmd.Process.Pid)
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		t.Fatalf("launcher hung for %s: %s\nits processes (pid ppid state wchan command):\n%s\nstdout (tail):\n%s\nstderr, then its goroutines:\n%s",
			hangAfter, cmd, tree, tail(out.String(), 2000), errb.String())
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// processTree lists pid and its descendants, one line each: pid, parent,
// state, what the kernel waits in, and the command line.
func processTree(pid int) string {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					parent[p], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	var b strings.Builder
	var walk func(p, depth int)
	walk = func(p, depth int) {
		dir := filepath.Join("/proc", strconv.Itoa(p))
		stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		wchan, _ := os.ReadFile(filepath.Join(dir, "wchan"))
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		fmt.Fprintf(&b, "%s%d %d %s %s %s\n", strings.Repeat("  ", depth), p, parent[p], state, wchan,
			strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))))
		for c, pp := range parent {
			if pp == p {
				walk(c, depth+1)
			}
		}
	}
	walk(pid, 0)
	return b.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func runLauncher(t *testing.T, args ...string) result {
	t.Helper()
	cmd, out, errb := launcher(t, nil, args...)
	return wait(t, cmd, out, errb)
}

// jobProcesses lists live processes whose environment holds marker, so a
// test can prove a job left nothing behind.
func jobProcesses(t testing.TB, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if bytes.Contains(env, []byte(marker)) && !isZombie(stat) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// startAgent runs the agent daemon hosting a store on a free loopback port.
func startAgent(t *testing.T) string { return startAgentWith(t, nil) }

// startAgentWith starts the agent with agentArgs and waits until a launcher
// given launcherArgs can run a job through it.
func startAgentWith(t *testing.T, agentArgs []string, launcherArgs ...string) string {
	t.Helper()
	return startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), agentArgs, launcherArgs...).addr
}

// agentProc is an agent daemon that hosts a store, started by a test.
type agentProc struct {
	addr   string // the store's TCP address: --listen, 127.0.0.1 for every address
	socket string // the store's Unix socket, in a directory every user can enter
	dir    string // the test's directory for the agent: socket, token
	cmd    *exec.Cmd
	log    func() string // its stderr so far; safe to read once it exited
}

// startAgentAt starts the agent hosting a store on listen, with its socket
// in a directory of the test's. Unless agentArgs name a token file, it and
// the test's launchers take the tests' one through MUSTER_TOKEN_FILE.
func startAgentAt(t *testing.T, listen string, agentArgs []string, launcherArgs ...string) *agentProc {
	t.Helper()
	dir, err := os.MkdirTemp("", "muster-e2e-agent-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As $XDG_RUNTIME_DIR/muster/agent.sock, where a user's launcher looks for it.
	ap := &agentProc{addr: listen, socket: filepath.Join(dir, "muster", "agent.sock"), dir: dir}
	if host, port, _ := net.SplitHostPort(listen); host == "0.0.0.0" || host == "::" || host == "" {
		ap.addr = net.JoinHostPort("127.0.0.1", port)
	}
	cmd := exec.Command(agentBin, append([]string{"--listen", listen, "--socket", ap.socket}, agentArgs...)...)
	cmd.Env = agentEnv()
	ap.cmd = cmd
	var errb testfixture.Buffer
	cmd.Stderr = &errb
	ap.log = errb.String
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cmd, "the agent", errb.String)
	args := append(append([]string{"run", "--cluster", ap.addr}, launcherArgs...), "--", "true")
	testwait.UntilShowing(t, 20*time.Second, "the agent to run a job", func() bool { return runLauncher(t, args...).code == 0 }, errb.String)
	return ap
}

// stopAtCleanup stops an agent with SIGTERM when the test ends, and fails
// the test, showing log, when it does not stop within 30 s: its own bound
// is the shutdown timeout (15 s) and the kill timeout, and a loaded machine
// adds to both.
func stopAtCleanup(t testing.TB, cmd *exec.Cmd, what string, log func() string) {
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s did not stop on SIGTERM; log:\n%s", what, log())
		}
	})
}

// runAgentOnce runs the agent expecting it to exit by itself.
func runAgentOnce(t *testing.T, args ...string) (string, error) {
	return runAgentOnceEnv(t, nil, args...)
}

// runAgentOnceEnv is runAgentOnce with env added to the agent's environment.
func runAgentOnceEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentBin, args...)
	cmd.Env = agentEnv(env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// testPrograms are the worker programs of testdata/, built once each.
var testPrograms sync.Map // name → *testProgramBuild

type testProgramBuild struct {
	once sync.Once
	path string
	err  error
}

// testProgram builds testdata/NAME, the first time it is asked for, beside
// the binaries, and returns its path.
func testProgram(t *testing.T, name string) string {
	t.Helper()
	v, _ := testPrograms.LoadOrStore(name, &testProgramBuild{})
	b := v.(*testProgramBuild)
	b.once.Do(func() {
		b.path = filepath.Join(filepath.Dir(launcherBin), name)
		if out, err := exec.Command("go", "build", "-o", b.path, "./testdata/"+name).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./testdata/%s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
