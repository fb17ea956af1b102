package launch

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testfixture"
)

// A --log-dir file the agent could not write whole (a full disk) is named
// by the launcher, which does not exit 0 for a job that succeeded; a rank
// whose file is whole is not named.
func TestRunSaysWhichLogIsIncomplete(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount a 64 KiB tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	tc := agenttest.NewCluster(t, 1, nil)
	// Rank 1 writes 256 KiB, more than the disk holds, once rank 0's one
	// line is on disk.
	script := fmt.Sprintf(`if [ "$RANK" = 1 ]; then
	  until [ -s %s/j-*/rank-0.log ]; do sleep 0.01; done
	  head -c 262144 /dev/zero | tr '\0' x; echo
	else echo small; fi`, dir)
	var stdout, stderr testfixture.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := Run(ctx, zaptest.NewLogger(t), tc.Client, Options{
		Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte(script)}, Nnodes: 1, Nproc: 2,
			LogDir: []byte(dir), KillTimeoutMs: 1000},
		Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{
		`(?m)^muster: rank 1's log on node node-0 is incomplete: write \S+/rank-1.log: no space left on device$`,
		`(?m)^muster: job j-\w+ succeeded, but a rank's --log-dir file is incomplete; exit code 1$`,
	} {
		if !regexp.MustCompile(want).MatchString(stderr.String()) {
			t.Errorf("stderr does not match %s:\n%s", want, stderr.String())
		}
	}
	if regexp.MustCompile(`rank 0's log`).MatchString(stderr.String()) {
		t.Errorf("rank 0's whole log named incomplete:\n%s", stderr.String())
	}
}
