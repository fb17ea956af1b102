package e2e

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// runWithStdin runs the launcher with stdin (nil: /dev/null) in dir (""
// for the test's own) and waits for it, bounded.
func runWithStdin(t *testing.T, stdin io.Reader, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(launcherBin, args...)
	cmd.Stdin, cmd.Dir = stdin, dir
	// A test that writes an endless stdin must not wait for its copy.
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return wait(t, cmd, &out, &errb)
}

func TestVersion(t *testing.T) {
	for _, bin := range []string{launcherBin, agentBin} {
		name := filepath.Base(bin)
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), name+" ") || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), "commit") {
			t.Errorf("%s --version: %v, %q; want one line with the version and the commit", name, err, out)
		}
	}
}

// A go build in a clean checkout names the commit it was built from.
func TestVersionOfACleanCheckout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the launcher again")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	clone := cleanCheckoutDir(t)
	if out, err := exec.Command("git", "clone", "-q", "--no-hardlinks", strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Skipf("git clone: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "-C", clone, "checkout", "-q", strings.TrimSpace(string(head))).CombinedOutput(); err != nil {
		t.Fatalf("git checkout: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "launcher")
	// -buildvcs=auto is the go command's default, which GOFLAGS may change.
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "./cmd/launcher")
	build.Dir = clone
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	want := regexp.MustCompile(`^launcher dev \(commit ` + string(head[:12]) + ` of \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)\n$`)
	if err != nil || !want.Match(out) {
		t.Fatalf("--version of a clean checkout: %v, %q; want %s", err, out, want)
	}
}

// cleanCheckoutDir is where TestVersionOfACleanCheckout clones the
// checkout: the same path from run to run, so that the build cache, whose
// keys hold a package's directory, serves the packages that did not change
// since the last run instead of compiling all of them. The clone is removed
// when the test ends, and a lock keeps runs at once out of each other's.
func cleanCheckoutDir(t *testing.T) string {
	t.Helper()
	base := filepath.Join(os.TempDir(), fmt.Sprintf("muster-e2e-clean-checkout-%d", os.Geteuid()))
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // closing it unlocks it, after the removal below
	clone := filepath.Join(base, "muster")
	if err := os.RemoveAll(clone); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(clone) })
	return clone
}

func TestTorchrunAndMPISpellings(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-np", "2"},
		{"-np=2"},
		{"--nproc-per-node", "2"},
		{"--nproc_per_node=2"},
		{"-npernode", "2"},
		{"--nproc", "3", "-np", "2"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runLauncher(t, append(append([]string{"run"}, args...), "--", "sh", "-c", `echo "rank $RANK of $WORLD_SIZE"`)...)
			if r.code != 0 || !strings.Contains(r.stdout, "[0] rank 0 of 2\n") || !strings.Contains(r.stdout, "[1] rank 1 of 2\n") {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// mpirun's -n counts processes; muster's counts nodes, and says so.
func TestMPIStyleNodeCountPointsToNP(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "-n", "4", "--", "true")
	if r.code != 2 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "(for 4 workers here, give -np 4)") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestUsageErrorIsOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"not a number", []string{"run", "--nproc", "abc", "--", "true"}, "launcher: --nproc abc: not a whole number; see launcher run --help"},
		{"mpirun's name", []string{"run", "-np", "four", "--", "true"}, "launcher: -np four: not a whole number; see launcher run --help"},
		{"unknown flag", []string{"run", "--nprocs", "2", "--", "true"}, "launcher: unknown flag --nprocs (did you mean --nproc?); see launcher run --help"},
		{"bad duration", []string{"run", "--timeout", "5x", "--", "true"}, "launcher: --timeout 5x: not a duration"},
		{"below a millisecond", []string{"run", "--timeout", "500us", "--", "true"}, "launcher: --timeout 500us: below a millisecond"},
		{"kill timeout below a millisecond", []string{"run", "--kill-timeout", "10ns", "--", "true"}, "launcher: --kill-timeout 10ns: below a millisecond"},
		{"missing command", []string{"run", "--nproc", "2"}, "launcher: no command given"},
		{"no workers", []string{"run", "--nproc", "0", "--", "true"}, "launcher: --nproc 0: at least 1"},
		{"negative workers", []string{"run", "-np", "-1", "--", "true"}, "launcher: -np -1: at least 1"},
		{"nproc overflow", []string{"run", "--nproc", "4294967298", "--", "true"}, "launcher: --nproc 4294967298: at most 4096"},
		{"nnodes overflow", []string{"run", "--nnodes", "4294967297", "--", "true"}, "launcher: --nnodes 4294967297: at most 10000"},
		{"gpus overflow", []string{"run", "--gpus", "4294967297", "--", "true"}, "launcher: --gpus 4294967297: at most 1024"},
		{"bad stdin", []string{"run", "--stdin", "first", "--", "true"}, "launcher: --stdin first: want a rank (0, 1, ...), all or none"},
		{"stdin past the job", []string{"run", "--nproc", "2", "--stdin", "2", "--", "true"}, "launcher: --stdin 2: the job's ranks are 0..1"},
		{"log dir that cannot be made", []string{"run", "--embedded", "--log-dir", "/proc/nope", "--", "true"}, "launcher: --log-dir: mkdir /proc/nope: no such file or directory"},
		{"output ranks past the job", []string{"run", "--nproc", "2", "--output-ranks", "2-5", "--", "true"}, "launcher: --output-ranks 2-5: the job's ranks are 0..1"},
		{"nodes without a cluster", []string{"nodes"}, "launcher: nodes needs --cluster HOST:PORT (or MUSTER_CLUSTER)"},
		{"jobs without a cluster", []string{"jobs"}, "launcher: jobs needs --cluster HOST:PORT (or MUSTER_CLUSTER)"},
		{"cancel without a cluster", []string{"cancel", "j-1"}, "launcher: cancel needs --cluster HOST:PORT (or MUSTER_CLUSTER)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runLauncher(t, tt.args...)
			see := "; see launcher " + tt.args[0] + " --help\n"
			if r.code != 2 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 ||
				!strings.HasPrefix(r.stderr, tt.want) || !strings.HasSuffix(r.stderr, see) {
				t.Fatalf("exit %d, stdout %q\nstderr %q\nwant exit 2 and one line %q...%q", r.code, r.stdout, r.stderr, tt.want, see)
			}
		})
	}
	out, err := runAgentOnce(t, "--node-rank", "4294967296")
	if err == nil || out != "agent: --node-rank 4294967296: at most 9999; see agent --help\n" {
		t.Fatalf("agent: %v, %q", err, out)
	}
}

// A bare launcher is a usage error: the usage on stderr, exit status 2.
func TestBareLauncherPrintsUsage(t *testing.T) {
	r := runLauncher(t)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "USAGE:\n   launcher [global options] command") ||
		!strings.Contains(r.stderr, "\n   run ") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant exit 2 and the usage on stderr", r.code, r.stdout, r.stderr)
	}
}

// run's help shows its flags in groups, in the order a user decides them,
// and ends with examples.
func TestRunHelpGroupsFlags(t *testing.T) {
	r := runLauncher(t, "run", "--help")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	groups := []struct {
		heading string
		flags   []string
	}{
		{"Placement", []string{"--nnodes", "--last-call", "--gpus", "--nproc", "--cpu-bind", "--host", "--hostfile", "--exclude"}},
		{"Environment", []string{"--env", "--workdir", "--isolate-gpus", "--no-nccl-autodetect", "--no-agent-store"}},
		{"Python", []string{"--module", "--no-python"}},
		{"Output", []string{"--stdin", "--tag-output", "--no-tag-output", "--events", "--output-ranks", "--tty", "--no-tty", "--timestamp-output", "--report-bindings", "--log-dir", "--verbose"}},
		{"Failure handling", []string{"--timeout", "--kill-timeout", "--memory-limit", "--max-restarts", "--restart-on", "--no-restart-exit-codes",
			"--restart-backoff", "--restart-backoff-max", "--health-check", "--health-check-timeout", "--hang-timeout", "--hang-first-timeout", "--hang-on-silence", "--forward-signals"}},
		{"MPI", []string{"--mpi"}},
		{"Cluster", []string{"--cluster", "--token-file", "--tls-ca", "--wait-timeout", "--embedded"}},
	}
	// Each group's block: its heading, then its flags up to a blank line.
	rest := r.stdout
	for _, g := range groups {
		i := strings.Index(rest, "\n   "+g.heading+":\n")
		if i < 0 {
			t.Fatalf("no group %q after the previous one in:\n%s", g.heading, r.stdout)
		}
		rest = rest[i+len(g.heading)+6:]
		block, _, _ := strings.Cut(rest, "\n\n")
		var got []string
		for _, line := range strings.Split(block, "\n") {
			got = append(got, strings.TrimSuffix(strings.Fields(line)[0], ","))
		}
		if strings.Join(got, " ") != strings.Join(g.flags, " ") {
			t.Errorf("group %s has %q; want %q", g.heading, got, g.flags)
		}
	}
	if !regexp.MustCompile(`\nEXAMPLES:\n   launcher run --gpus 2 -- python train.py +one worker per GPU, on this machine\n(?:   .*\n|\n)+$`).MatchString(r.stdout) {
		t.Errorf("help does not end with examples:\n%s", r.stdout)
	}
}

func TestClusterCommandsSayTheyNeedACluster(t *testing.T) {
	for _, cmd := range []string{"nodes", "jobs", "cancel"} {
		r := runLauncher(t, cmd, "--help")
		// The column the usage starts in depends on the command's longest flag.
		if r.code != 0 || !strings.Contains(r.stdout, "(needs --cluster)") ||
			!regexp.MustCompile(`--cluster HOST:PORT +the store's HOST:PORT, or unix:///PATH of an agent's socket \(required`).MatchString(r.stdout) {
			t.Errorf("%s --help: exit %d\n%s", cmd, r.code, r.stdout)
		}
	}
}

func TestEnvValuesKeptAsGiven(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "env")
	values := []string{"CUDA_VISIBLE_DEVICES=0,1", "NCCL_SOCKET_IFNAME=^docker0,lo", "TRAILING=a b  ", "RAW=caf\xe9\x01,x"}
	args := []string{"run", "-x", "OUT=" + out}
	for _, v := range values {
		args = append(args, "-x", v)
	}
	args = append(args, "--", "sh", "-c", `printf '%s|%s|%s|%s' "$CUDA_VISIBLE_DEVICES" "$NCCL_SOCKET_IFNAME" "$TRAILING" "$RAW" > "$OUT"`)
	r := runLauncher(t, args...)
	got, _ := os.ReadFile(out)
	if want := "0,1|^docker0,lo|a b  |caf\xe9\x01,x"; r.code != 0 || string(got) != want {
		t.Fatalf("exit %d, stderr %q\nworker saw %q\nwant       %q", r.code, r.stderr, got, want)
	}
}

func TestBareNumberIsSeconds(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--timeout", "1", "--kill-timeout", "1", "--", "sleep", "60")
	if r.code != 124 || !strings.Contains(r.stderr, "timed out after 1s") {
		t.Fatalf("exit %d, stderr %q; want 124 after 1s", r.code, r.stderr)
	}
}

func TestNonUTF8PassesThrough(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	cwd := filepath.Join(base, "caf\xe9")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Skipf("this file system refuses non-UTF-8 names: %v", err)
	}
	out := filepath.Join(base, "seen")
	logDir := filepath.Join(base, "logs\xfe")
	script := `printf '%s\n%s\n%s\n' "$(pwd)" "$V" "$1" > "$OUT"`
	want := cwd + "\n" + "\xff value\n" + "arg\xfe\n"
	tests := []struct {
		name string
		dir  string
		args []string
	}{
		{"current directory", cwd, nil},
		{"--workdir", base, []string{"--workdir", cwd}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(out)
			args := append([]string{"run", "--log-dir", logDir, "-x", "OUT=" + out, "-x", "V=\xff value"}, tt.args...)
			r := runWithStdin(t, nil, tt.dir, append(args, "--", "sh", "-c", script, "sh", "arg\xfe")...)
			got, _ := os.ReadFile(out)
			if r.code != 0 || string(got) != want {
				t.Fatalf("exit %d, stderr %q\nworker saw %q\nwant       %q", r.code, r.stderr, got, want)
			}
			if logs, _ := filepath.Glob(filepath.Join(logDir, "j-*", "rank-0.log")); len(logs) == 0 {
				t.Fatalf("--log-dir: no rank-0.log in a job directory under %q", logDir)
			}
		})
	}
	// A failing rank whose stderr is not UTF-8 still ends the job with its code.
	r := runLauncher(t, "run", "--nproc", "2", "--", "sh", "-c", `[ "$RANK" = 1 ] && { printf 'bad \376 byte\n' >&2; exit 3; }; exec sleep 1000`)
	if r.code != 3 || !strings.Contains(r.stderr, "rank 1 (node") || !strings.Contains(r.stderr, "bad \xfe byte") {
		t.Fatalf("exit %d, stderr %q; want 3 naming rank 1", r.code, r.stderr)
	}
}

func TestStdin(t *testing.T) {
	t.Parallel()
	readHex := `echo "read $(od -An -tx1 | tr -d ' \n')"`
	hexOf := func(s string) string { return "read " + hex.EncodeToString([]byte(s)) }
	tests := []struct {
		name  string
		args  []string
		stdin string
		want  []string // what ranks 0..2 read
	}{
		{"rank 0 by default", nil, "hello\n", []string{"hello\n", "", ""}},
		{"a chosen rank", []string{"--stdin", "2"}, "hello\n", []string{"", "", "hello\n"}},
		{"all", []string{"--stdin", "all"}, "a\nb", []string{"a\nb", "a\nb", "a\nb"}},
		{"none", []string{"--stdin", "none"}, "hello\n", []string{"", "", ""}},
		{"bytes as given", nil, "caf\xe9 \r\n\x00", []string{"caf\xe9 \r\n\x00", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"run", "--nproc", "3", "--no-tag-output"}, tt.args...), "--", "sh", "-c", `echo "$RANK $(`+readHex+`)"`)
			r := runWithStdin(t, strings.NewReader(tt.stdin), "", args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for rank, w := range tt.want {
				if line := fmt.Sprintf("%d %s\n", rank, hexOf(w)); !strings.Contains(r.stdout, line) {
					t.Errorf("want %q in %q", line, r.stdout)
				}
			}
		})
	}

	t.Run("large", func(t *testing.T) {
		const size = 64 << 20
		r := runWithStdin(t, io.LimitReader(zeros{}, size), "", "run", "--nproc", "2", "--", "sh", "-c", `[ "$RANK" = 0 ] && wc -c; true`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != fmt.Sprintf("[0] %d", size) {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("never read", func(t *testing.T) {
		// An endless stdin nobody reads holds up neither output nor exit.
		r := runWithStdin(t, zeros{}, "", "run", "--nproc", "2", "--stdin", "all", "--", "sh", "-c", `echo "done $RANK"`)
		if r.code != 0 || !strings.Contains(r.stdout, "[0] done 0\n") || !strings.Contains(r.stdout, "[1] done 1\n") {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		addr := startAgent(t)
		r := runWithStdin(t, strings.NewReader("via the agent\n"), "", "run", "--cluster", addr, "--nproc", "2", "--", "sh", "-c", `echo "$RANK got $(cat)"`)
		if r.code != 0 || !strings.Contains(r.stdout, "[0] 0 got via the agent\n") || !strings.Contains(r.stdout, "[1] 1 got \n") {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestMessagesSayThingsOnce(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--nproc", "3", "--", "sh", "-c", `[ "$RANK" = 2 ] && exit 3; exec sleep 1000`)
	if r.code != 3 || r.stderr == "" || strings.Contains(r.stderr, "exit code 3") ||
		!regexp.MustCompile(`^muster: job j-\w+ failed: rank 2 \(node [^,]+, local rank 2\) exited with code 3\n$`).MatchString(r.stderr) {
		t.Fatalf("exit %d, stderr %q; want the exit code said once", r.code, r.stderr)
	}

	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-once", time.Now().UnixNano())
	cmd, out, errb := launcher(t, nil, "run", "--nproc", "2", "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "2 workers", func() bool { return len(jobProcesses(t, marker)) == 2 })
	cmd.Process.Signal(syscall.SIGTERM)
	r = wait(t, cmd, out, errb)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 143 || len(lines) != 2 ||
		!regexp.MustCompile(`^muster: SIGTERM: stopping job j-\w+ \(a second one kills it at once\)$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^muster: job j-\w+ stopped by SIGTERM \(exit code 143\)$`).MatchString(lines[1]) {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestQuietUnlessVerbose(t *testing.T) {
	t.Parallel()
	// The embedded agent logs a warning when a job cannot start: here, the
	// job's own directory cannot be made in its log directory, /proc/self,
	// which the launcher finds there.
	r := runLauncher(t, "run", "--log-dir", "/proc/self", "--", "true")
	if r.code != 1 || strings.Contains(r.stderr, "WARN") || regexp.MustCompile(`\.go:\d+`).MatchString(r.stderr) ||
		!strings.Contains(r.stderr, "--log-dir: mkdir /proc/self/j-") {
		t.Fatalf("exit %d, stderr %q; want the failure alone", r.code, r.stderr)
	}
	r = runLauncher(t, "run", "--verbose", "--log-dir", "/proc/self", "--", "true")
	if !strings.Contains(r.stderr, "WARN") {
		t.Fatalf("--verbose: stderr %q; want the agent's log", r.stderr)
	}
}

func TestStartFailuresNameTheCause(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	script := filepath.Join(dir, "x.sh")
	os.WriteFile(file, []byte("x"), 0o644)
	os.WriteFile(script, []byte("#!/usr/bin/nope\necho hi\n"), 0o755)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"workdir is a file", []string{"--workdir", file, "--", "true"}, 2, "--workdir \"" + file + "\" is not a directory"},
		{"missing interpreter", []string{"--workdir", dir, "--", "./x.sh"}, 127, "cannot start ./x.sh: its interpreter /usr/bin/nope (from its #! line) does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runLauncher(t, append([]string{"run"}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
		})
	}
}

// The same bad hostfile line is the same usage error (exit 2) from
// launcher hostfile as from launcher run --hostfile, naming the file and line.
func TestBadHostfileLineExitsTwoEverywhere(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(bad, []byte("node01 slots=4\nnode02 slots=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"hostfile", "--hostfile", bad}, {"run", "--hostfile", bad, "--", "true"}} {
		r := runLauncher(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, bad+":2: slots must be a positive integer") {
			t.Errorf("launcher %s: exit %d, want 2 naming %s:2; stderr:\n%s", args[0], r.code, bad, r.stderr)
		}
	}
}

// agent --help shows its flags in groups, in a fixed order, each default
// once, and ends with examples.
func TestAgentHelpIsGroupedWithExamples(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(agentBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("agent --help: %v\n%s", err, out)
	}
	help := string(out)
	last := -1
	for _, group := range []string{"   Store:", "   Cluster:", "   Security:", "   GPUs and health:", "   Workers:", "   Logs and metrics:", "EXAMPLES:"} {
		i := strings.Index(help, "\n"+group)
		if i < 0 || i < last {
			t.Fatalf("agent --help: %q missing or out of order:\n%s", group, help)
		}
		last = i
	}
	for _, l := range strings.Split(help, "\n") {
		if strings.Count(l, "(default") > 1 {
			t.Errorf("a default said twice: %s", strings.TrimSpace(l))
		}
	}
}
