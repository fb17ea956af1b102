package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

var logsToRe = regexp.MustCompile(`muster: job (j-[^ ]+) logs to `)

// jobOf is the job a launcher run with --log-dir named.
func jobOf(t *testing.T, r result) string {
	t.Helper()
	m := logsToRe.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no job named in the launcher's stderr: %q", r.stderr)
	}
	return m[1]
}

// seqText is seq(1)'s numbers from first to last, space separated.
func seqText(first, last int) string {
	var b strings.Builder
	for i := first; i <= last; i++ {
		if i > first {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()
}

// byRank splits tagged lines by rank, each rank's in order.
func byRank(out string) map[int][]string {
	m := map[int][]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		tag, body, _ := strings.Cut(l, " ")
		if rank, err := strconv.Atoi(strings.Trim(tag, "[]")); err == nil {
			m[rank] = append(m[rank], body)
		}
	}
	return m
}

// A finished job's output comes back whole from every node that ran it:
// each rank's lines, each in its stream, at 64 ranks on two hosts.
func TestLogsOfAFinishedJob(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	nw.startCluster()
	const lines = 500
	logDir := t.TempDir()
	r := nw.run("run", "-n", "2", "--nproc", "32", "--log-dir", logDir, "--", "sh", "-c",
		fmt.Sprintf(`seq 1 %d; seq 1 $((RANK + 1)) >&2`, lines))
	if r.code != 0 {
		t.Fatalf("job: exit %d: %s", r.code, r.stderr)
	}
	job := jobOf(t, r)

	logs := nw.run("logs", job)
	if logs.code != 0 {
		t.Fatalf("launcher logs: exit %d: %s", logs.code, logs.stderr)
	}
	out := countLines(t, logs.stdout, func(_ int, body string) bool { n, err := strconv.Atoi(body); return err == nil && n >= 1 && n <= lines })
	errs := countLines(t, logs.stderr, func(_ int, body string) bool { _, err := strconv.Atoi(body); return err == nil })
	for rank := range 64 {
		if out[rank] != lines || errs[rank] != rank+1 {
			t.Fatalf("rank %d: %d stdout lines and %d stderr lines, want %d and %d", rank, out[rank], errs[rank], lines, rank+1)
		}
	}
	if len(out) != 64 || len(errs) != 64 {
		t.Fatalf("%d ranks on stdout, %d on stderr, want 64", len(out), len(errs))
	}

	// One rank's last lines, untagged: 3 lines in all, each stream's the
	// end of what it wrote (the streams' lines interleave as they were read).
	one := nw.run("logs", "--rank", "40", "--tail", "3", job)
	outTail, errTail := strings.Fields(one.stdout), strings.Fields(one.stderr)
	endsWith := func(full string, end []string) bool {
		return len(end) == 0 || strings.HasSuffix(" "+full, " "+strings.Join(end, " "))
	}
	if one.code != 0 || len(outTail)+len(errTail) != 3 || !endsWith(seqText(1, lines), outTail) || !endsWith(seqText(1, 41), errTail) {
		t.Fatalf("--rank 40 --tail 3: exit %d, stdout %q, stderr %q", one.code, one.stdout, one.stderr)
	}
	one = nw.run("logs", "--rank", "3", job)
	if one.code != 0 || strings.Join(strings.Fields(one.stdout), " ") != seqText(1, lines) || one.stderr != "1\n2\n3\n4\n" {
		t.Fatalf("--rank 3: exit %d, %d bytes of stdout, stderr %q", one.code, len(one.stdout), one.stderr)
	}
}

// Only the job's user and the operator read a job's output.
func TestLogsRefuseAnotherUsersJob(t *testing.T) {
	t.Parallel()
	needOtherUser(t)
	tok := filepath.Join(t.TempDir(), "token")
	ag := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--token-file", tok}, "--token-file", tok)
	sock := "unix://" + ag.socket
	logDir := t.TempDir()
	r := runLauncher(t, "run", "--cluster", ag.addr, "--token-file", tok, "--log-dir", logDir, "--", "echo", "root's secret")
	if r.code != 0 {
		t.Fatalf("root's job: exit %d: %s", r.code, r.stderr)
	}
	rootJob := jobOf(t, r)
	theirs := asNobody(t, "--clear-groups", "logs", "--cluster", sock, rootJob)
	if theirs.code == 0 || strings.Contains(theirs.stdout, "secret") || !strings.Contains(theirs.stderr, "belongs to another user") {
		t.Fatalf("nobody read root's job's output: exit %d, stdout %q, stderr %q", theirs.code, theirs.stdout, theirs.stderr)
	}
	// Their own job they read; the operator reads every job.
	r = asNobody(t, "--clear-groups", "run", "--cluster", sock, "--no-tag-output", "--", "sh", "-c", `echo "$MUSTER_JOB_ID"`)
	job := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(job, "j-") {
		t.Fatalf("nobody's job: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want := "[0] " + job + "\n"
	if own := asNobody(t, "--clear-groups", "logs", "--cluster", sock, job); own.code != 0 || own.stdout != want {
		t.Fatalf("nobody's own job: exit %d, stdout %q, stderr %q", own.code, own.stdout, own.stderr)
	}
	if op := runLauncher(t, "logs", "--cluster", ag.addr, "--token-file", tok, job); op.code != 0 || op.stdout != want {
		t.Fatalf("the operator: exit %d, stdout %q, stderr %q", op.code, op.stdout, op.stderr)
	}
}

// --follow prints a running job's lines as they come, from another host,
// and ends when the job does.
func TestLogsFollowARunningJob(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	nw.startCluster()
	dir := t.TempDir()
	logDir := t.TempDir()
	job, _, jobErr := nw.launcher("run", "-n", "2", "--nproc", "2", "--log-dir", logDir, "--", "sh", "-c",
		fmt.Sprintf(`echo "before $RANK"; while [ ! -e %s/go ]; do sleep 0.05; done; echo "after $RANK"`, dir))
	var id string
	testwait.Until(t, 20*time.Second, "the job's id", func() bool {
		m := logsToRe.FindStringSubmatch(jobErr.String())
		if m != nil {
			id = m[1]
		}
		return m != nil
	})
	// From the second host: any machine with the token reaches the store.
	h := nw.hosts[1]
	follow := exec.Command("ip", "netns", "exec", h.ns, launcherBin, "logs", "--cluster", nw.store(), "--token-file", nw.token,
		"--tls-ca", nw.ca, "--follow", id)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var followErr strings.Builder
	follow.Stderr = &followErr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(want map[string]bool) {
		t.Helper()
		for len(want) > 0 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the follower ended waiting for %v", want)
				}
				if !want[l] {
					t.Fatalf("unexpected line %q, waiting for %v", l, want)
				}
				delete(want, l)
			case <-time.After(30 * time.Second):
				t.Fatalf("no line for 30 s, waiting for %v", want)
			}
		}
	}
	next(map[string]bool{"[0] before 0": true, "[1] before 1": true, "[2] before 2": true, "[3] before 3": true})
	// Only now do the ranks write more: the follower must stream it.
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next(map[string]bool{"[0] after 0": true, "[1] after 1": true, "[2] after 2": true, "[3] after 3": true})
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the follower: %v; stderr %q", err, followErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end with the job")
	}
	if err := job.Wait(); err != nil {
		t.Fatalf("job: %v", err)
	}
}

// Each line keeps its stream and its order in it, in --log-dir's files and
// in launcher logs, however the reads of the two pipes race: 8 jobs of 16
// ranks.
func TestLogLinesKeepTheirStream(t *testing.T) {
	t.Parallel()
	ag := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), nil)
	const ranks = 16
	for run := range 8 {
		logDir := t.TempDir()
		r := runLauncher(t, "run", "--cluster", ag.addr, "--nproc", strconv.Itoa(ranks), "--log-dir", logDir, "--",
			"sh", "-c", "echo out; echo err >&2; echo out2")
		if r.code != 0 {
			t.Fatalf("run %d: exit %d: %s", run, r.code, r.stderr)
		}
		job := jobOf(t, r)
		logs := runLauncher(t, "logs", "--cluster", ag.addr, job)
		if logs.code != 0 {
			t.Fatalf("run %d: launcher logs: exit %d: %s", run, logs.code, logs.stderr)
		}
		outLines, errLines := byRank(logs.stdout), byRank(logs.stderr)
		for rank := range ranks {
			out, _ := os.ReadFile(filepath.Join(logDir, job, fmt.Sprintf("rank-%d.log", rank)))
			errs, _ := os.ReadFile(filepath.Join(logDir, job, fmt.Sprintf("rank-%d.err.log", rank)))
			if string(out) != "out\nout2\n" || string(errs) != "err\n" {
				t.Fatalf("run %d, rank %d: --log-dir stdout %q, stderr %q; want \"out\\nout2\\n\" and \"err\\n\"", run, rank, out, errs)
			}
			if got := strings.Join(outLines[rank], " "); got != "out out2" {
				t.Fatalf("run %d, rank %d: launcher logs' stdout %q, want \"out out2\"", run, rank, got)
			}
			if got := strings.Join(errLines[rank], " "); got != "err" {
				t.Fatalf("run %d, rank %d: launcher logs' stderr %q, want \"err\"", run, rank, got)
			}
		}
	}
}

// --follow goes on through a restarted job's rounds: every round's lines,
// each once, and it ends with the job.
func TestLogsFollowARestartedJob(t *testing.T) {
	t.Parallel()
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "solo"})
	dir := t.TempDir()
	// Each round's ranks print 3 lines; round 0 waits for the follower's go
	// and then rank 1 fails it.
	script := fmt.Sprintf(`for i in 1 2 3; do echo "follow-me round $TORCHELASTIC_RESTART_COUNT line $i"; done
	if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
	  until [ -e %s/go ]; do sleep 0.02; done
	  [ "$RANK" = 1 ] && exit 3
	  exec sleep 100
	fi`, dir)
	cmd, out, errb := launcher(t, nil, "run", "--cluster", host.addr, "--nproc", "2", "--max-restarts", "1", "--restart-backoff", "1s", "--", "sh", "-c", script)
	var job string
	testwait.Until(t, 20*time.Second, "the job listed", func() bool {
		list := runLauncher(t, "jobs", "--cluster", host.addr).stdout
		if !strings.Contains(list, "follow-me") {
			return false
		}
		job = jobListed(t, list, "follow-me")
		return true
	})
	follow, fout, ferr := launcher(t, nil, "logs", "--cluster", host.addr, "--follow", job)
	testwait.Until(t, 20*time.Second, "round 0's lines followed", func() bool { return strings.Count(fout.String(), "round 0 line") == 6 })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, out, errb); r.code != 0 {
		t.Fatalf("the job: exit %d: %s", r.code, r.stderr)
	}
	r := wait(t, follow, fout, ferr)
	for round := range 2 {
		if n := strings.Count(r.stdout, fmt.Sprintf("round %d line", round)); r.code != 0 || n != 6 {
			t.Fatalf("launcher logs --follow: exit %d, %d lines of round %d, want 6:\n%s%s", r.code, n, round, r.stdout, r.stderr)
		}
	}
}
