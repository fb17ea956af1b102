package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// A finished job outlives its store: the agent hosting it is killed
// (kill -9) and started again on the same data directory, and `launcher
// jobs` and `launcher jobs JOB` still show how the job ended.
func TestJobHistoryOutlivesAStoreKill(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	listen := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
	args := []string{"--name", "head", "--data-dir", data, "--verbose"}
	host := startAgentAt(t, listen, args)

	script := `if [ "$RANK" = 1 ]; then echo "rank one gives up" >&2; exit 7; fi; sleep 100`
	r := runLauncher(t, "run", "--cluster", host.addr, "--nproc", "2", "--", "sh", "-c", script)
	if r.code != 7 {
		t.Fatalf("the job: exit %d, want 7; stderr:\n%s", r.code, r.stderr)
	}
	job := jobListed(t, runLauncher(t, "jobs", "--cluster", host.addr).stdout, "rank one gives up")
	testwait.Until(t, 20*time.Second, "the job's record to be written", func() bool {
		return strings.Contains(host.log(), `"msg":"job recorded","job":"`+job+`"`)
	})
	if err := host.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	host.cmd.Wait()

	host = startAgentAt(t, listen, args)
	// Its ranks' output too, which the agent kept: the history names its nodes.
	testwait.Until(t, 20*time.Second, "the agent to register again", func() bool { return runLauncher(t, "nodes", "--cluster", host.addr).code == 0 })
	if logs := runLauncher(t, "logs", "--cluster", host.addr, "--rank", "1", job); logs.code != 0 || logs.stderr != "rank one gives up\n" {
		t.Errorf("launcher logs --rank 1 %s after the restart: exit %d, stdout %q, stderr %q", job, logs.code, logs.stdout, logs.stderr)
	}
	list := runLauncher(t, "jobs", "--cluster", host.addr)
	var row []string
	for _, l := range strings.Split(list.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == job {
			row = f
		}
	}
	// JOB STATE EXIT USER NODES START END ROUNDS COMMAND... SUMMARY...
	if len(row) < 9 || row[1] != "failed" || row[2] != "7" || row[4] != "head" || !isRFC3339(row[5]) || !isRFC3339(row[6]) || row[7] != "1" ||
		!strings.Contains(strings.Join(row, " "), "rank 1 (node head, local rank 1) exited with code 7") {
		t.Fatalf("launcher jobs after the restart lists %q; all:\n%s%s\nagent:\n%s", row, list.stdout, list.stderr, host.log())
	}
	one := runLauncher(t, "jobs", "--cluster", host.addr, job)
	for _, want := range []string{
		"job:", job, "state:", "failed", "exit code:", "7",
		"summary:", "rank 1 (node head, local rank 1) exited with code 7",
		"user:", "(operator)", "spec:", "1 node(s), 2 worker(s) a node", "rounds:", "1 (0 restart(s))",
		"round 0:", "head, started ", "failed rank:", "1 on head", "stderr:", "rank one gives up",
	} {
		if !strings.Contains(one.stdout, want) {
			t.Fatalf("launcher jobs %s: no %q in:\n%s%s", job, want, one.stdout, one.stderr)
		}
	}
	asJSON := runLauncher(t, "jobs", "--cluster", host.addr, "-o", "json", job)
	var got struct{ Kind, ID, State, Summary string }
	if err := json.Unmarshal([]byte(asJSON.stdout), &got); err != nil || got.Kind != "Job" || got.ID != job || got.State != "failed" ||
		!strings.Contains(got.Summary, "exited with code 7") {
		t.Errorf("launcher jobs -o json %s: %+v, %v:\n%s%s", job, got, err, asJSON.stdout, asJSON.stderr)
	}
	for _, field := range []string{"submitted", "started", "ended"} {
		m := regexp.MustCompile(`(?m)^` + field + `:\s+(\S+)$`).FindStringSubmatch(one.stdout)
		if m == nil || !isRFC3339(m[1]) {
			t.Errorf("launcher jobs %s: %s is not an RFC 3339 time:\n%s", job, field, one.stdout)
		}
	}
	if r := runLauncher(t, "jobs", "--cluster", host.addr, "j-000000000000"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("an unknown job: exit %d, %q", r.code, r.stderr)
	}
	// Another local user, on the agent's socket, neither lists nor reads it.
	sock := "unix://" + host.socket
	if r := asNobody(t, "--clear-groups", "jobs", "--cluster", sock); r.code != 0 || strings.Contains(r.stdout, job) {
		t.Errorf("nobody's jobs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := asNobody(t, "--clear-groups", "jobs", "--cluster", sock, job); r.code != 1 || !strings.Contains(r.stderr, "belongs to another user") {
		t.Errorf("nobody read the operator's job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// jobListed is the ID of the job whose line of `launcher jobs` holds text.
func jobListed(t *testing.T, jobs, text string) string {
	t.Helper()
	for _, l := range strings.Split(jobs, "\n") {
		if strings.Contains(l, text) {
			return strings.Fields(l)[0]
		}
	}
	t.Fatalf("no job with %q in:\n%s", text, jobs)
	return ""
}

func isRFC3339(s string) bool {
	_, err := time.Parse(time.RFC3339, s)
	return err == nil
}

// A corrupt history file is named, moved aside, and the store starts with
// an empty history that keeps the next jobs.
func TestCorruptJobHistoryMovedAside(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	file := filepath.Join(data, "jobs.db")
	if err := os.WriteFile(file, []byte(strings.Repeat("not a job history\n", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--data-dir", data})
	if !strings.Contains(host.log(), `"msg":"job history file is corrupt: moved aside, starting empty","file":"`+file+`"`) {
		t.Fatalf("the agent did not name the corrupt file %s:\n%s", file, host.log())
	}
	if aside, _ := filepath.Glob(file + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("moved aside: %v", aside)
	}
	// startAgentAt ran a job to know the agent was ready: it is kept.
	if r := runLauncher(t, "jobs", "--cluster", host.addr); !strings.Contains(r.stdout, "succeeded") {
		t.Fatalf("jobs after the corrupt file:\n%s%s", r.stdout, r.stderr)
	}
}
