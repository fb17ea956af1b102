package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// initHelperEnv names what the test binary does when started as a PID 1 by
// the tests below: it runs RunInitIfPID1 as main does, then, as the init's
// child, the program named by the variable's value.
const initHelperEnv = "MUSTER_TEST_INIT_PROGRAM"

func runInitHelperIfRequested() {
	program, ok := os.LookupEnv(initHelperEnv)
	if !ok {
		return
	}
	RunInitIfPID1()
	os.Exit(initHelper(program))
}

// initHelper is the init's child: it prints "ready" once it may be signalled.
func initHelper(program string) int {
	switch {
	case strings.HasPrefix(program, "exit "):
		code, _ := strconv.Atoi(strings.TrimPrefix(program, "exit "))
		return code
	case program == "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case program == "pid":
		fmt.Println(os.Getpid())
		return 0
	case program == "graceful":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		fmt.Println("ready")
		fmt.Printf("graceful stop on %d\n", <-sigs)
		return 5
	case program == "orphans":
		// Each sleep's parent, sh, exits at once: the sleeps go to PID 1.
		if err := exec.Command("/bin/sh", "-c", "sleep 0.5 & sleep 0.5 & sleep 0.5 &").Run(); err != nil {
			fmt.Println(err)
			return 1
		}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		fmt.Println("ready")
		<-sigs
		return 0
	}
	fmt.Println("unknown program", program)
	return 1
}

// pid1 is the test binary running as PID 1 of a new PID namespace.
type pid1 struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

// startPID1 starts the test binary as the init of a new PID namespace, its
// child running program; env is added to the environment.
func startPID1(t *testing.T, program string, env ...string) *pid1 {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a new PID namespace needs root")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), initHelperEnv+"="+program), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			t.Skipf("cannot make a PID namespace here: %v", err)
		}
		t.Fatal(err)
	}
	// Killing a namespace's init kills everything in it.
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &pid1{cmd: cmd, out: bufio.NewReader(stdout)}
}

// line reads the child's next line of output.
func (p *pid1) line(t *testing.T) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		s, _ := p.out.ReadString('\n')
		got <- strings.TrimSpace(s)
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no output from the init's child")
		return ""
	}
}

// exitCode waits for the init to exit, reading what is left of its output.
func (p *pid1) exitCode(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, p.out)
		p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the init did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

// childStates maps each child of pid to its state letter in /proc (Z for a
// zombie).
func childStates(pid int) map[int]string {
	states := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which may hold ')': state, ppid.
		f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
		if len(f) < 2 || string(f[1]) != strconv.Itoa(pid) {
			continue
		}
		child, _ := strconv.Atoi(e.Name())
		states[child] = string(f[0])
	}
	return states
}

func TestInitPassesExitCode(t *testing.T) {
	tests := []struct {
		program string
		want    int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill", 128 + int(syscall.SIGKILL)},
	}
	for _, tt := range tests {
		t.Run(tt.program, func(t *testing.T) {
			p := startPID1(t, tt.program)
			if got := p.exitCode(t); got != tt.want {
				t.Fatalf("exit code %d, want %d", got, tt.want)
			}
		})
	}
}

func TestInitForwardsStopSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startPID1(t, "graceful")
			if s := p.line(t); s != "ready" {
				t.Fatalf("child said %q", s)
			}
			// From outside the namespace, as a container runtime stops a container.
			p.cmd.Process.Signal(sig)
			if s, want := p.line(t), fmt.Sprintf("graceful stop on %d", sig); s != want {
				t.Fatalf("child said %q, want %q", s, want)
			}
			if got := p.exitCode(t); got != 5 {
				t.Fatalf("exit code %d, want the child's 5", got)
			}
		})
	}
}

func TestInitReapsOrphans(t *testing.T) {
	t.Parallel()
	p := startPID1(t, "orphans")
	if s := p.line(t); s != "ready" {
		t.Fatalf("child said %q", s)
	}
	initPid := p.cmd.Process.Pid
	if n := len(childStates(initPid)); n < 2 {
		t.Fatalf("the init has %d children, want its child and the orphaned sleeps", n)
	}
	testwait.UntilShowing(t, 10*time.Second, "the orphans to be reaped",
		func() bool { return len(childStates(initPid)) == 1 },
		func() string { return fmt.Sprintf("children of the init and their states: %v", childStates(initPid)) })
	p.cmd.Process.Signal(syscall.SIGTERM)
	if got := p.exitCode(t); got != 0 {
		t.Fatalf("exit code %d, want 0", got)
	}
}

func TestNoInitEscape(t *testing.T) {
	tests := []struct {
		env    []string
		asPID1 bool // whether the program itself ran as PID 1
	}{
		{nil, false},
		{[]string{noInitEnv + "=1"}, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.env), func(t *testing.T) {
			p := startPID1(t, "pid", tt.env...)
			if s := p.line(t); (s == "1") != tt.asPID1 {
				t.Fatalf("the program ran as pid %s; as PID 1: %v, want %v", s, s == "1", tt.asPID1)
			}
			if got := p.exitCode(t); got != 0 {
				t.Fatalf("exit code %d", got)
			}
		})
	}
}
