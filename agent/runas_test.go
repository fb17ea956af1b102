package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// userCluster is a store serving every local user on a socket, with one
// agent running as root, and a client connected as nobody (65534) with the
// supplementary group 100.
func userCluster(t *testing.T) (nobody *rendezvous.Client, agentTmp string) {
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
	store := rendezvous.NewTestStore(t, func(c *rendezvous.Config) { c.Socket, c.SocketUsers = sock, true })
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o1777)
	os.Chmod(tmp, 0o1777)
	a, err := Start(context.Background(), Config{
		Logger: zaptest.NewLogger(t), StoreAddr: store.Addr(), Security: rendezvous.TestSecurity(store),
		Name: "node-0", Addr: "127.0.0.1", Rank: -1, TempDir: tmp,
		Environ: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "AGENT_SECRET=do-not-leak", "HOME=/root", "USER=root"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(0) })
	return rendezvous.NewTestClientAs(t, sock, 65534, 65534, []int{100}), tmp
}

func runAs(t *testing.T, c *rendezvous.Client, spec *musterv1.JobSpec) ([]string, *musterv1.JobFinished) {
	t.Helper()
	tc := &TestCluster{Client: c}
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

func TestNonRootAgentRefusesAnotherUsersJob(t *testing.T) {
	a := &Agent{cfg: Config{Name: "node-0"}}
	other := uint32(os.Geteuid() + 1)
	cred, err := a.credential("j-1", &musterv1.Identity{Uid: uint32(os.Geteuid())})
	if cred != nil || err != nil {
		t.Fatalf("own user's job: %v %v; want to run it as the agent", cred, err)
	}
	cred, err = a.credential("j-1", &musterv1.Identity{Uid: other, Gid: 7, Groups: []uint32{8}, User: "someone"})
	if os.Geteuid() == 0 {
		if err != nil || cred == nil || cred.Uid != other || cred.Gid != 7 || fmt.Sprint(cred.Groups) != "[8]" {
			t.Fatalf("root agent: %+v %v", cred, err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "only an agent running as root runs other users' jobs") {
		t.Fatalf("non-root agent given another user's job: %v %v", cred, err)
	}
}

func TestAsUserChangesOnlyItsThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "muster-asuser-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	f, err := openFileAs(cred, filepath.Join(dir, "theirs"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i := 0; i < 20; i++ { // other goroutines stay root
		g, err := os.Create(filepath.Join(dir, fmt.Sprint("mine-", i)))
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		time.Sleep(time.Millisecond)
	}
	for name, uid := range map[string]uint32{"theirs": 65534, "mine-19": 0} {
		fi, _ := os.Stat(filepath.Join(dir, name))
		if got := fi.Sys().(*syscall.Stat_t).Uid; got != uid {
			t.Errorf("%s belongs to uid %d, want %d", name, got, uid)
		}
	}
}
