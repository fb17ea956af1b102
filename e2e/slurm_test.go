package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// The tests here run deploy/slurm/muster.sbatch under a real Slurm (Debian's
// 22.05: slurmctld, slurmd, slurm-client and munge; `bash .ci/run` installs
// them as root): munged on the test's own socket and key, slurmctld on the
// first host of a network of namespaces, and a slurmd on every host with the
// host's name. Each node offers 8 GPUs that Slurm counts (gres.conf names
// /dev/null) and the agents are told of (MUSTER_GPU_DEVICES), so a job runs
// 8 workers a node as on GPU machines.

// slurmScript is the shipped batch script.
const slurmScript = "../deploy/slurm/muster.sbatch"

// slurmGPUs is how many GPUs each node offers.
const slurmGPUs = 8

// slurmCluster is a Slurm cluster on nw's hosts; everything it starts
// stops, and everything it writes goes, when the test ends.
type slurmCluster struct {
	t    *testing.T
	nw   *network
	dir  string // slurm.conf, state, spool, munge's key and socket, logs
	conf string
	logs []string // the daemons' logs, shown when the test fails
}

// needSlurm skips the test, saying why, where Slurm or munge is missing,
// and returns where the daemons are: /usr/sbin may be off a user's PATH.
func needSlurm(t *testing.T) map[string]string {
	t.Helper()
	found := map[string]string{}
	for _, c := range []string{"slurmctld", "slurmd", "munged", "sbatch", "scontrol", "scancel", "sinfo", "unshare"} {
		path, err := exec.LookPath(c)
		if err != nil {
			path, err = exec.LookPath("/usr/sbin/" + c)
		}
		if err != nil {
			t.Skipf("needs Slurm and munge (Debian: slurmctld slurmd slurm-client munge, which `bash .ci/run` installs as root): %s not found", c)
		}
		found[c] = path
	}
	return found
}

// newSlurm starts munged, slurmctld on the first of n hosts and a slurmd on
// each, and waits until every node is idle.
func newSlurm(t *testing.T, n int) *slurmCluster {
	t.Helper()
	bin := needSlurm(t)
	nw := newNetwork(t, n)
	s := &slurmCluster{t: t, nw: nw, dir: t.TempDir()}
	s.conf = filepath.Join(s.dir, "slurm.conf")
	// Registered before the daemons start, so it runs once they stopped.
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range s.logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s (tail):\n%s", filepath.Base(l), tail(string(b), 3000))
			}
		}
	})

	// Each host resolves every host's name: ip netns exec binds
	// /etc/netns/NS/hosts over /etc/hosts for what it runs.
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for _, h := range nw.hosts {
		fmt.Fprintf(&hosts, "%s %s\n", h.ip, h.name)
	}
	for _, h := range nw.hosts {
		dir := filepath.Join("/etc/netns", h.ns)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		s.write(filepath.Join(dir, "hosts"), hosts.String())
	}

	munge := filepath.Join(s.dir, "munge")
	if err := os.Mkdir(munge, 0o700); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(munge, "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(munge, "socket")
	s.daemon("munged", bin["munged"], "--foreground", "--force", "--key-file="+filepath.Join(munge, "key"),
		"--socket="+socket, "--pid-file="+filepath.Join(munge, "pid"), "--seed-file="+filepath.Join(munge, "seed"),
		"--log-file="+filepath.Join(munge, "log"))
	testwait.Until(t, 10*time.Second, "munged's socket", func() bool { _, err := os.Stat(socket); return err == nil })

	var nodes strings.Builder
	for _, h := range nw.hosts {
		fmt.Fprintf(&nodes, "NodeName=%s NodeAddr=%s CPUs=8 Gres=gpu:%d\n", h.name, h.ip, slurmGPUs)
		if err := os.Mkdir(filepath.Join(s.dir, "spool-"+h.name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(s.dir, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Processes are tracked by their parents (linuxproc): no cgroup, no
	// systemd. Each daemon listens in its host's namespace, so the default
	// ports clash with nothing.
	s.write(s.conf, fmt.Sprintf(`ClusterName=muster
SlurmctldHost=%[1]s(%[2]s)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[3]s
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool-%%n
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd-%%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
%[5]sPartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`, nw.hosts[0].name, nw.hosts[0].ip, socket, s.dir, nodes.String()))
	// slurmd 22.05 always loads a cgroup plugin, and ip netns exec mounts a
	// /sys without cgroups, where autodetection fails; v1 loads without
	// them and, with linuxproc and task/none, is never used.
	s.write(filepath.Join(s.dir, "cgroup.conf"), "CgroupPlugin=cgroup/v1\n")
	// Slurm counts a GPU only with a device file; these are /dev/null.
	for i := range slurmGPUs {
		if err := os.Symlink("/dev/null", filepath.Join(s.dir, fmt.Sprintf("gpu%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	s.write(filepath.Join(s.dir, "gres.conf"), fmt.Sprintf("Name=gpu File=%s/gpu[0-%d]\n", s.dir, slurmGPUs-1))

	s.daemon("slurmctld", s.onHost(nw.hosts[0], bin["slurmctld"], "-D")...)
	for _, h := range nw.hosts {
		s.daemon("slurmd-"+h.name, s.onHost(h, bin["slurmd"], "-D", "-N", h.name)...)
	}
	want := strings.Repeat("idle\n", n)
	testwait.Until(s.t, 20*time.Second, "every node idle in sinfo", func() bool {
		out, _ := s.run("sinfo", "-h", "-N", "-o", "%t").Output()
		return string(out) == want
	})
	return s
}

// onHost is the command line that runs args on h, with h's host name.
func (s *slurmCluster) onHost(h *host, args ...string) []string {
	return append([]string{"ip", "netns", "exec", h.ns, "unshare", "--uts", "sh", "-c", `hostname "$0" && exec "$@"`, h.name}, args...)
}

func (s *slurmCluster) write(path, text string) {
	s.t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// daemon starts a daemon that stays in the foreground, its output in a log
// of its own; it stops when the test ends.
func (s *slurmCluster) daemon(name string, args ...string) {
	s.t.Helper()
	log := filepath.Join(s.dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.logs = append(s.logs, log)
	stopAtCleanup(s.t, cmd, name, func() string { b, _ := os.ReadFile(log); return string(b) })
}

// run is a Slurm command on the first host, where jobs are submitted.
func (s *slurmCluster) run(args ...string) *exec.Cmd {
	return s.runOn(s.nw.hosts[0], args...)
}

// runOn is a Slurm command on host h.
func (s *slurmCluster) runOn(h *host, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.ns}, args...)...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
	return cmd
}

// must runs a Slurm command on the first host and fails the test when it
// fails.
func (s *slurmCluster) must(args ...string) string {
	s.t.Helper()
	out, err := s.run(args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// slurmJob is a batch job of the shipped script: its id, the directory it
// was submitted from (its output, slurm-ID.out, is there) and the one its
// workers leave their marks in.
type slurmJob struct {
	s          *slurmCluster
	id         string
	dir, marks string
}

// sbatch submits the shipped script from the first host with the job's
// command, cmd, after sbatch's own options; the agents and the launcher are
// on its PATH.
func (s *slurmCluster) sbatch(options []string, cmd ...string) *slurmJob {
	s.t.Helper()
	j := &slurmJob{s: s, dir: s.t.TempDir()}
	j.marks = filepath.Join(j.dir, "marks")
	if err := os.Mkdir(j.marks, 0o755); err != nil {
		s.t.Fatal(err)
	}
	script, err := filepath.Abs(slurmScript)
	if err != nil {
		s.t.Fatal(err)
	}
	args := append(append([]string{"sbatch", "--parsable"}, options...), script)
	c := s.run(append(args, cmd...)...)
	c.Dir = j.dir
	gpus := make([]string, slurmGPUs)
	for i := range gpus {
		gpus[i] = strconv.Itoa(i)
	}
	c.Env = agentEnv("SLURM_CONF="+s.conf, "PATH="+filepath.Dir(agentBin)+":"+os.Getenv("PATH"),
		"MUSTER_GPU_DEVICES="+strings.Join(gpus, ","), "TMPDIR="+j.dir, "MARKS="+j.marks)
	out, err := c.CombinedOutput()
	if err != nil {
		s.t.Fatalf("sbatch: %v: %s", err, out)
	}
	j.id = strings.TrimSpace(string(out))
	return j
}

// info is the job's fields as scontrol shows them, by name.
func (j *slurmJob) info() map[string]string {
	out, err := j.s.run("scontrol", "-o", "show", "job", j.id).Output()
	if err != nil {
		return nil
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

// wait waits until the job has ended, and returns its state and exit code
// as scontrol shows them (COMPLETED, 0:0).
func (j *slurmJob) wait(d time.Duration) (state, exit string) {
	j.s.t.Helper()
	testwait.Until(j.s.t, d, "job "+j.id+" to end", func() bool {
		f := j.info()
		state, exit = f["JobState"], f["ExitCode"]
		return slices.Contains([]string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
			"PREEMPTED", "BOOT_FAIL", "DEADLINE"}, state)
	})
	return state, exit
}

// output is the job's output file.
func (j *slurmJob) output() string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "slurm-"+j.id+".out"))
	return string(b)
}

// marked lists the ranks that left a mark of kind (pid, term, usr1), sorted.
func (j *slurmJob) marked(kind string) []int {
	files, _ := filepath.Glob(filepath.Join(j.marks, kind+".*"))
	var ranks []int
	for _, f := range files {
		if r, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(f), ".")); err == nil {
			ranks = append(ranks, r)
		}
	}
	slices.Sort(ranks)
	return ranks
}

// ranks is 0 .. n-1.
func ranks(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// leftovers lists what still runs on the hosts but Slurm's daemons
// (slurmscriptd is slurmctld's helper): agents, workers, slurmstepd.
func (s *slurmCluster) leftovers() []string {
	var left []string
	for _, h := range s.nw.hosts {
		out, _ := exec.Command("ip", "netns", "pids", h.ns).Output()
		for _, f := range strings.Fields(string(out)) {
			comm, err := os.ReadFile("/proc/" + f + "/comm")
			if c := strings.TrimSpace(string(comm)); err == nil && !slices.Contains([]string{"slurmd", "slurmctld", "slurmscriptd"}, c) {
				cmdline, _ := os.ReadFile("/proc/" + f + "/cmdline")
				left = append(left, fmt.Sprintf("%s on %s: %s", f, h.name, strings.ReplaceAll(string(cmdline), "\x00", " ")))
			}
		}
	}
	return left
}

// noneLeft waits until nothing of the job runs on any host.
func (s *slurmCluster) noneLeft() {
	s.t.Helper()
	testwait.UntilShowing(s.t, 20*time.Second, "nothing of the job left on the hosts", func() bool { return len(s.leftovers()) == 0 },
		func() string { return strings.Join(s.leftovers(), "\n") })
}

// slurmWorker is the workers' program, by its first argument:
//
//	lines [RANK CODE]  prints three lines and exits 0, or CODE as rank RANK
//	wait               marks its pid, then waits: SIGTERM or SIGUSR1
//	                   leaves a mark and exits 0, as does a file
//	                   named release in $MARKS
const slurmWorker = `
case $1 in
lines)
	for i in 1 2 3; do echo "rank $RANK of $WORLD_SIZE on $(hostname) line $i"; done
	[ "$RANK" = "$2" ] && exit "$3"
	exit 0;;
wait)
	trap 'echo > "$MARKS/term.$RANK"; exit 0' TERM
	trap 'echo > "$MARKS/usr1.$RANK"; exit 0' USR1
	echo $$ > "$MARKS/pid.$RANK"
	while [ ! -e "$MARKS/release" ]; do sleep 0.1; done
	echo "rank $RANK released on $(hostname)"
	exit 0;;
esac
exit 2
`

// worker writes the workers' program and returns the job's command.
func (s *slurmCluster) worker(args ...string) []string {
	s.t.Helper()
	path := filepath.Join(s.dir, "worker.sh")
	if _, err := os.Stat(path); err != nil {
		s.write(path, slurmWorker)
	}
	return append([]string{"sh", path}, args...)
}

// waitReady waits until all n workers of the job have started.
func (j *slurmJob) waitReady(n int) {
	j.s.t.Helper()
	testwait.Until(j.s.t, 30*time.Second, fmt.Sprintf("%d workers started", n), func() bool { return len(j.marked("pid")) == n })
}

// The shipped script runs two nodes of 8 workers each under Slurm: every
// rank's lines once, tagged, node rank 0 on the first node of the
// allocation, and the job's exit code as Slurm's; a failing rank's code is
// the job's, named in its output.
func TestSlurmBatchJob(t *testing.T) {
	t.Parallel()
	s := newSlurm(t, 2)
	const world = 2 * slurmGPUs

	j := s.sbatch(nil, s.worker("lines")...)
	state, exit := j.wait(60 * time.Second)
	out := j.output()
	if state != "COMPLETED" || exit != "0:0" {
		t.Fatalf("job %s: %s, exit code %s, want COMPLETED 0:0; output:\n%s", j.id, state, exit, out)
	}
	line := regexp.MustCompile(`^\[(\d+)\] rank (\d+) of (\d+) on (\S+) line (\d)$`)
	seen := map[string]int{}
	var tagged int
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "[") {
			continue
		}
		tagged++
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("unexpected line %q", l)
			continue
		}
		rank, _ := strconv.Atoi(m[2])
		wantHost := s.nw.hosts[rank/slurmGPUs].name
		if m[1] != m[2] || m[3] != strconv.Itoa(world) || m[4] != wantHost {
			t.Errorf("line %q: want tag %d, world %d, host %s", l, rank, world, wantHost)
		}
		seen[m[2]+" "+m[5]]++
	}
	if tagged != 3*world || len(seen) != 3*world {
		t.Errorf("%d tagged lines, %d distinct, want %d of each; output:\n%s", tagged, len(seen), 3*world, out)
	}
	if !regexp.MustCompile(`(?m)^muster: job \S+ succeeded, exit code 0$`).MatchString(out) {
		t.Errorf("no summary line in the output:\n%s", out)
	}

	j = s.sbatch(nil, s.worker("lines", "11", "7")...)
	state, exit = j.wait(60 * time.Second)
	out = j.output()
	if state != "FAILED" || exit != "7:0" {
		t.Errorf("job %s with rank 11 exiting 7: %s, exit code %s, want FAILED 7:0; output:\n%s", j.id, state, exit, out)
	}
	if !regexp.MustCompile(`(?m)^muster: job \S+ failed, exit code 7: rank 11 `).MatchString(out) {
		t.Errorf("the output does not name rank 11's failure:\n%s", out)
	}
	s.noneLeft()
}

// scancel stops every worker on every node gracefully: each gets SIGTERM
// and runs its handler, and nothing of the job is left.
func TestSlurmScancel(t *testing.T) {
	t.Parallel()
	s := newSlurm(t, 2)
	const world = 2 * slurmGPUs
	j := s.sbatch(nil, s.worker("wait")...)
	j.waitReady(world)
	s.must("scancel", j.id)
	state, _ := j.wait(60 * time.Second)
	if got := j.marked("term"); state != "CANCELLED" || !slices.Equal(got, ranks(world)) {
		t.Errorf("job %s: %s, workers that got SIGTERM %v, want CANCELLED and all %d; output:\n%s", j.id, state, got, world, j.output())
	}
	s.noneLeft()
}

// sbatch --signal=B:USR1@N, Slurm's warning before the time limit, reaches
// every worker: the script execs srun, which passes the signal to every
// node's step. The workers exit 0 on it, and so does the job.
func TestSlurmSignalBatch(t *testing.T) {
	t.Parallel()
	s := newSlurm(t, 2)
	const world = 2 * slurmGPUs
	// slurmctld looks at time limits every 30 s: with 120 s to go from
	// the start, the first look sends the signal.
	j := s.sbatch([]string{"--time=2", "--signal=B:USR1@120"}, s.worker("wait")...)
	state, exit := j.wait(90 * time.Second)
	if got := j.marked("usr1"); state != "COMPLETED" || exit != "0:0" || !slices.Equal(got, ranks(world)) {
		t.Errorf("job %s: %s, exit code %s, workers that got SIGUSR1 %v; want COMPLETED 0:0 and all %d; output:\n%s",
			j.id, state, exit, got, world, j.output())
	}
	if got := j.marked("term"); len(got) > 0 {
		t.Errorf("workers %v got SIGTERM", got)
	}
	s.noneLeft()
}

// A node drained in Slurm mid-job keeps its part of the job to the end:
// Slurm drains a node by starting nothing new on it. SIGTERM to the node's
// agent (its pid from scontrol listpids on the node) makes it a graceful
// departure: the agent leaves the job first, which then stops on every node
// with each worker's SIGTERM handler run (the script's srun
// --kill-on-bad-exit=1 ends the step once the agent has exited). A node set
// down instead ends the whole job, gracefully too.
func TestSlurmDrain(t *testing.T) {
	t.Parallel()
	s := newSlurm(t, 3)
	const world = 2 * slurmGPUs

	j := s.sbatch([]string{"--nodelist=a,b"}, s.worker("wait")...)
	j.waitReady(world)
	s.must("scontrol", "update", "nodename=b", "state=drain", "reason=maintenance")
	if st := s.nodeState("b"); st != "ALLOCATED+DRAIN" && st != "MIXED+DRAIN" {
		t.Errorf("node b: %s, want draining", st)
	}
	if err := os.WriteFile(filepath.Join(j.marks, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	state, exit := j.wait(60 * time.Second)
	out := j.output()
	if got := strings.Count(out, " released on "); state != "COMPLETED" || exit != "0:0" || got != world {
		t.Errorf("job %s on a drained node: %s, exit code %s, %d workers released; want COMPLETED 0:0, %d; output:\n%s", j.id, state, exit, got, world, out)
	}
	if got := j.marked("term"); len(got) > 0 {
		t.Errorf("workers %v got SIGTERM on a drain", got)
	}
	if st := s.nodeState("b"); st != "IDLE+DRAIN" {
		t.Errorf("node b after the job: %s, want IDLE+DRAIN (drained)", st)
	}

	j = s.sbatch([]string{"--nodelist=a,c"}, s.worker("wait")...)
	j.waitReady(world)
	s.must("scontrol", "update", "nodename=c", "state=drain", "reason=maintenance")
	agent := s.taskPid(j, s.nw.host("c"))
	if err := syscall.Kill(agent, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	state, _ = j.wait(60 * time.Second)
	out = j.output()
	if got := j.marked("term"); state != "FAILED" || !slices.Equal(got, ranks(world)) {
		t.Errorf("job %s: %s, workers that got SIGTERM %v; want FAILED and all %d; output:\n%s", j.id, state, got, world, out)
	}
	// The store hears that c left from its agent or from its stream's end,
	// whichever comes first; neither is a crash (agent connection closed).
	if !strings.Contains(out, "node c lost: it left the cluster (") {
		t.Errorf("the output does not name node c's departure:\n%s", out)
	}
	s.noneLeft()

	// A node set down is a node failure to Slurm: it cancels the whole
	// job, SIGTERM on every node, and would requeue it but for --no-requeue.
	s.must("scontrol", "update", "nodename=b", "state=resume")
	j = s.sbatch([]string{"--nodelist=a,b", "--no-requeue"}, s.worker("wait")...)
	j.waitReady(world)
	s.must("scontrol", "update", "nodename=b", "state=down", "reason=maintenance")
	state, _ = j.wait(60 * time.Second)
	if got := j.marked("term"); state != "NODE_FAIL" || !slices.Equal(got, ranks(world)) {
		t.Errorf("job %s on a node set down: %s, workers that got SIGTERM %v; want NODE_FAIL and all %d; output:\n%s", j.id, state, got, world, j.output())
	}
	s.noneLeft()
}

// nodeState is a node's state as scontrol shows it.
func (s *slurmCluster) nodeState(name string) string {
	s.t.Helper()
	for _, f := range strings.Fields(s.must("scontrol", "-o", "show", "node", name)) {
		if v, ok := strings.CutPrefix(f, "State="); ok {
			return v
		}
	}
	return ""
}

// taskPid is the pid of the job's task on h, its agent: what scontrol
// listpids on the node lists with local id 0.
func (s *slurmCluster) taskPid(j *slurmJob, h *host) int {
	s.t.Helper()
	out, err := s.runOn(h, "scontrol", "listpids", j.id, h.name).CombinedOutput()
	if err != nil {
		s.t.Fatalf("scontrol listpids %s %s: %v: %s", j.id, h.name, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		// PID JOBID STEPID LOCALID GLOBALID
		if f := strings.Fields(l); len(f) == 5 && f[1] == j.id && f[2] == "0" && f[3] == "0" {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				return pid
			}
		}
	}
	s.t.Fatalf("no task of step %s.0 on %s in scontrol listpids:\n%s", j.id, h.name, out)
	return 0
}
