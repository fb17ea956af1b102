package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// A store restarted in the middle of a job: the launcher follows the job on
// the new store, says output may be missing, and exits with the job's code;
// the job's TCPStore, which its agent reported to the new store, closes as
// the job ends.
func TestLauncherFollowsAJobAcrossAStoreRestart(t *testing.T) {
	t.Parallel()
	tc := agenttest.NewCluster(t, 2, nil)
	dir := t.TempDir()
	script := fmt.Sprintf(`touch %[1]s/started-$RANK; while [ ! -e %[1]s/go ]; do sleep 0.02; done; echo "rank $RANK after, store $MASTER_ADDR:$MASTER_PORT"; [ "$RANK" = 1 ] && exit 7; exit 0`, dir)
	var stdout, stderr bytes.Buffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
			Spec:   &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte(script)}, Nnodes: 2, Nproc: 1, KillTimeoutMs: 1000},
			Stdout: &stdout, Stderr: &stderr, Store: tc.Store.Addr(), Reattach: 20 * time.Second,
		})
		done <- result{code, err}
	}()
	testwait.Until(t, 20*time.Second, "the job's two workers to start", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) == 2
	})
	addr := tc.Store.Addr()
	tc.Store.Close()
	rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr = addr })
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	select {
	case r := <-done:
		if r.err != nil || r.code != 7 {
			t.Fatalf("exit %d, %v; stderr:\n%s", r.code, r.err, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "restarted while job") {
		t.Fatalf("no word of the restart; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "rank 1 after") {
		t.Errorf("output written after the restart is missing; stdout:\n%s", stdout.String())
	}
	m := regexp.MustCompile(`store (\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no TCPStore address; stdout:\n%s", stdout.String())
	}
	// The release is a command the store sends as the job ends.
	testwait.Until(t, 10*time.Second, "the ended job's TCPStore at "+m[1]+" to stop serving", func() bool {
		c, err := net.DialTimeout("tcp", m[1], time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}

// A store restarted while a job waited for nodes, which no agent held: the
// launcher submits the job again and it runs once its nodes come. A job
// that had started and whose nodes went with the store is not run again:
// the launcher says at once that it is lost.
func TestLauncherSubmitsAgainAJobTheRestartedStoreLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		nnodes  int32
		started bool   // the job's workers ran before the store went
		stdin   string // "devnull", "data" for rank 0's stdin; "" for none
		code    int
		want    string // on stderr, or in the error
	}{
		{"waiting for nodes", 2, false, "", 0, "restarted before job j-"},
		{"waiting for nodes, stdin from /dev/null", 2, false, "devnull", 0, "restarted before job j-"},
		{"waiting for nodes, stdin read", 2, false, "data", 1, "it had not started, but stdin already read went with it: submit it again"},
		{"running", 1, true, "", 1, "no agent reports the job: it was lost with its nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The agent closed with the store cannot send its worker's exit:
			// it gives up on it after a second, not the default 15 s.
			tc := agenttest.NewCluster(t, 1, func(_ int, cfg *agent.Config) { cfg.ShutdownTimeout = time.Second })
			dir := t.TempDir()
			script := fmt.Sprintf(`echo "rank $RANK of $WORLD_SIZE"; touch %s/started; sleep 30`, dir)
			if !tt.started {
				// A rank reading stdin ends only once stdin's end reaches it.
				script = `cat >/dev/null; echo "rank $RANK of $WORLD_SIZE"`
			}
			spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte(script)}, Nnodes: tt.nnodes, Nproc: 1,
				WaitTimeoutMs: time.Minute.Milliseconds(), KillTimeoutMs: 1000}
			var stdin io.Reader
			read := make(chan struct{})
			switch tt.stdin {
			case "devnull":
				f, err := os.Open(os.DevNull)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				stdin, spec.StdinRank = f, new(int32)
				close(read)
			case "data":
				stdin, spec.StdinRank = &signalReader{r: strings.NewReader("data\n"), read: read}, new(int32)
			default:
				close(read)
			}
			var stdout, stderr testfixture.Buffer
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
					Spec: spec, Stdin: stdin, Stdout: &stdout, Stderr: &stderr, Store: tc.Store.Addr(), Reattach: time.Minute,
				})
				done <- result{code, err}
			}()
			ready := "waiting for nodes"
			if tt.started {
				ready = "rank 0 of 1"
			}
			testwait.UntilShowing(t, 20*time.Second, fmt.Sprintf("%q", ready),
				func() bool { return strings.Contains(stderr.String()+stdout.String(), ready) }, stderr.String)
			<-read // what stdin gave went to the first job
			addr := tc.Store.Addr()
			tc.Store.Close()
			if tt.started {
				// The job's one node goes with the store.
				tc.Agents[0].Close(0)
			}
			rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr = addr; c.SessionGrace = time.Second })
			if !tt.started && tt.code == 0 {
				testwait.UntilShowing(t, 20*time.Second, "the launcher to submit the job again",
					func() bool { return strings.Contains(stderr.String(), "submitted it again") }, stderr.String)
				tc.AddAgent(t, nil)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
			}
			got := stderr.String()
			if r.err != nil {
				got += r.err.Error()
			}
			if r.code != tt.code || !strings.Contains(got, tt.want) {
				t.Fatalf("exit %d, %v, want %d and %q; stderr:\n%s", r.code, r.err, tt.code, tt.want, stderr.String())
			}
			if !tt.started && tt.code == 0 && !strings.Contains(stdout.String(), "rank 0 of 2") {
				t.Errorf("the job submitted again did not run; stdout:\n%s", stdout.String())
			}
		})
	}
}

// signalReader closes read once r has been read from.
type signalReader struct {
	r    io.Reader
	read chan struct{}
	once sync.Once
}

func (s *signalReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.once.Do(func() { close(s.read) })
	return n, err
}
