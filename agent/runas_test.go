package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// userCluster is a store serving every local user on a socket, with one
// agent running as root, and a client connected as nobody (65534) with the
// supplementary group 100.
func userCluster(t *testing.T) (nobody *storeclient.Client, agentTmp string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs other users' jobs only as root")
	}
	dir, err := os.MkdirTemp("", "muster-runas-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	store := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.Socket, c.SocketUsers = sock, true })
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, os.ModeSticky|0o777)
	os.Chmod(tmp, os.ModeSticky|0o777)
	a, err := agent.Start(context.Background(), agent.Config{
		Logger: zaptest.NewLogger(t), StoreAddr: store.Addr(), Security: rendezvoustest.Security(store),
		Name: "node-0", Addr: "127.0.0.1", Rank: -1, TempDir: filepath.Join(dir, "jobs"),
		Environ: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "AGENT_SECRET=do-not-leak", "HOME=/root", "USER=root"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(0) })
	return rendezvoustest.NewClientAs(t, sock, 65534, 65534, []int{100}), tmp
}

func runAs(t *testing.T, c *storeclient.Client, spec *musterv1.JobSpec) ([]string, *musterv1.JobFinished) {
	t.Helper()
	tc := &agenttest.Cluster{Client: c}
	out, fin := follow(t, tc, spec)
	return out[0], fin
}

func TestAnotherUsersJobRunsAsThem(t *testing.T) {
	nobody, tmp := userCluster(t)
	logDir := filepath.Join(tmp, "logs")
	out, fin := runAs(t, nobody, &musterv1.JobSpec{
		Argv: args("sh", "-c", `id -u; id -g; id -G; echo "$USER ${AGENT_SECRET:-none}"; `+
			`stat -c %u "$MUSTER_HOSTFILE"; test -n "$MUSTER_JOB_TOKEN" && echo token`),
		Nnodes: 1, LogDir: []byte(logDir), InheritEnv: true, Workdir: []byte("/"),
	})
	if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %v: %s", fin.State, fin.Summary)
	}
	want := []string{"65534", "65534", "65534 100", "nobody none", "65534", "token"}
	if strings.Join(out, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the job saw\n%s\nwant\n%s", strings.Join(out, "\n"), strings.Join(want, "\n"))
	}
	// Its files are the user's: made as the user, never by root for them.
	logs, _ := filepath.Glob(filepath.Join(logDir, "j-*", "rank-0.log"))
	if len(logs) != 1 {
		t.Fatalf("log files %v", logs)
	}
	for _, p := range []string{logDir, filepath.Dir(logs[0]), logs[0]} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s belongs to %d:%d, want 65534:65534", p, st.Uid, st.Gid)
		}
	}
}

func TestAnotherUserCannotWriteWhereTheyCannot(t *testing.T) {
	nobody, _ := userCluster(t)
	private := t.TempDir() // root's, mode 0700
	for _, tt := range []struct {
		name string
		spec *musterv1.JobSpec
		want string
	}{
		{"log dir in root's directory", &musterv1.JobSpec{Argv: args("true"), Nnodes: 1, LogDir: []byte(filepath.Join(private, "logs"))}, "permission denied"},
		{"log dir that is root's", &musterv1.JobSpec{Argv: args("true"), Nnodes: 1, LogDir: []byte(private)}, "permission denied"},
		{"working directory root's", &musterv1.JobSpec{Argv: args("true"), Nnodes: 1, Workdir: []byte(private)}, "permission denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, fin := runAs(t, nobody, tt.spec)
			if fin.State != musterv1.JobState_JOB_STATE_FAILED || !strings.Contains(fin.Summary, tt.want) {
				t.Fatalf("job ended %v: %q; want a failure saying %q", fin.State, fin.Summary, tt.want)
			}
		})
	}
	if entries, _ := os.ReadDir(private); len(entries) != 0 {
		t.Fatalf("files were made in root's directory for another user: %v", entries)
	}
}

// A job's logs never go where a link another user planted leads: the agent
// refuses the link rather than follow it.
func TestLogDirFollowsNoOtherUsersLink(t *testing.T) {
	nobody, tmp := userCluster(t)
	theirs := filepath.Join(tmp, "theirs")
	asHostile(t, fmt.Sprintf("mkdir -m 777 %s && ln -s %s %s/logs", theirs, theirs, tmp))
	logs := filepath.Join(tmp, "logs")
	_, fin := runAs(t, nobody, &musterv1.JobSpec{Argv: args("true"), Nnodes: 1, LogDir: []byte(logs), Workdir: []byte("/")})
	want := "--log-dir: " + logs + " is a symbolic link of uid 65533, not uid 65534 or root"
	if fin.State != musterv1.JobState_JOB_STATE_FAILED || !strings.Contains(fin.Summary, want) {
		t.Fatalf("job ended %v: %q; want a failure saying %q", fin.State, fin.Summary, want)
	}
	if entries, _ := os.ReadDir(theirs); len(entries) != 0 {
		t.Fatalf("the job's logs went to the other user's directory: %v", entries)
	}
}
