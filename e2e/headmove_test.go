package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// The head node dies (kill -9) while a job runs on two other nodes, and a
// store is started on a fourth: the agents find it through gossip and
// register there, the job keeps running, and its exit code is reported by
// the new store.
func TestHeadMovesWhileJobsRun(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 4)
	a, b, c, d := nw.hosts[0], nw.hosts[1], nw.hosts[2], nw.hosts[3]
	head := nw.startHead()
	bAgent := nw.join(b, nw.token)
	nw.join(c, nw.token)
	nw.waitReady(3, 20*time.Second)

	dir := t.TempDir()
	script := `touch ` + dir + `/started-$RANK; while [ ! -e ` + dir + `/go ]; do sleep 0.1; done; exit 3`
	nw.launcher("run", "-H", b.name+","+c.name, "--", "sh", "-c", script)
	testwait.Until(t, 20*time.Second, "both workers running", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) == 2
	})

	kill9(t, head)
	// A second store is refused while gossip still takes the head for alive.
	testwait.Until(t, 20*time.Second, "gossip to find the head dead", func() bool {
		return strings.Contains(bAgent.logText(), "gossip lost a peer")
	})
	nw.storeCerts(a, d) // under the one CA, which launcher certs kept
	nw.startAgent(d, d.name, append([]string{"--join", b.ip}, nw.storeArgs(d)...)...)
	jobs := func() string {
		out, _ := exec.Command("ip", "netns", "exec", d.ns, launcherBin, "jobs", "--cluster", d.ip+":29400",
			"--token-file", nw.token, "--tls-ca", nw.ca).CombinedOutput()
		return string(out)
	}
	testwait.Until(t, 20*time.Second, "the new store to take the job over", func() bool {
		return strings.Contains(jobs(), "running")
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the job to end with its exit code", func() bool {
		for _, l := range strings.Split(jobs(), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && strings.HasPrefix(f[0], "j-") && f[1] == "failed" && f[2] == "3" {
				return true
			}
		}
		return false
	})
	if out := jobs(); strings.Contains(out, "fenced") {
		t.Errorf("the job was fenced:\n%s", out)
	}
}
