package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
)

// hostile is the uid of another local user, who means harm.
const hostile = 65533

// asHostile runs script as the hostile user.
func asHostile(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostile, Gid: hostile}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", hostile, script, err, out)
	}
}

// reachableDir is a directory of the test's with mode, which the hostile
// user may enter (a test's directories are in one only root may enter).
func reachableDir(t *testing.T, mode os.FileMode) string {
	d := t.TempDir()
	os.Chmod(filepath.Dir(d), 0o711)
	os.Chmod(d, mode)
	return d
}

// No local user can keep an agent from starting: not with a FIFO or a link
// named like a job directory's lock in the shared temporary directory, nor
// in a job directory of their own (which they may change as they like).
func TestNoLocalUserKeepsTheAgentFromStarting(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the other user's files are made as another uid")
	}
	// A FIFO elsewhere, which a link leads to: opening it blocks as well.
	elsewhere := reachableDir(t, 0o777)
	asHostile(t, "mkfifo "+elsewhere+"/fifo")
	plant := func(dir string) {
		asHostile(t, fmt.Sprintf("cd %s && mkdir -p muster-j-pwn muster-j-sym && mkfifo muster-j-pwn/.lock && ln -s %s/fifo muster-j-sym/.lock", dir, elsewhere))
	}
	tests := []struct {
		name string
		// setup returns the agent's TempDir ("" for the default), and sets
		// its environment.
		setup func(t *testing.T) string
	}{
		{"in the shared temporary directory", func(t *testing.T) string {
			shared := reachableDir(t, os.ModeSticky|0o777)
			plant(shared)
			t.Setenv("TMPDIR", shared)
			// systemd's RuntimeDirectory, not to touch this machine's /run/muster.
			t.Setenv("RUNTIME_DIRECTORY", t.TempDir())
			return ""
		}},
		{"in a job directory of their own", func(t *testing.T) string {
			private := reachableDir(t, 0o711)
			for _, d := range []string{"muster-j-pwn", "muster-j-sym"} {
				os.Mkdir(filepath.Join(private, d), 0o700)
				os.Chown(filepath.Join(private, d), hostile, hostile)
			}
			plant(private)
			return private
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tempDir := tt.setup(t)
			store := rendezvoustest.NewStore(t, nil)
			started := make(chan error, 1)
			go func() {
				a, err := agent.Start(context.Background(), agent.Config{
					Logger: zaptest.NewLogger(t), StoreAddr: store.Addr(), Security: rendezvoustest.Security(store),
					Name: "node-0", Addr: "127.0.0.1", Rank: -1, TempDir: tempDir, Environ: []string{"PATH=/usr/bin:/bin"},
				})
				if err == nil {
					t.Cleanup(func() { a.Close(0) })
				}
				started <- err
			}()
			select {
			case err := <-started:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				// Let go of an agent blocked in open() on the FIFOs.
				for _, f := range []string{elsewhere + "/fifo", os.Getenv("TMPDIR") + "/muster-j-pwn/.lock", tempDir + "/muster-j-pwn/.lock"} {
					if fd, err := syscall.Open(f, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						syscall.Close(fd)
					}
				}
				t.Fatal("the agent hung starting")
			}
		})
	}
}
