package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// hostileUID is another local user of a shared machine, who means harm.
const hostileUID = 65533

// sharedTmp is a directory every user may write to, as /tmp is (sticky),
// where the hostile user has planted a FIFO, and a link to another, under
// the names of a job directory's lock.
func sharedTmp(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the hostile user's files are made as another uid")
	}
	tmp := t.TempDir()
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, os.ModeSticky|0o777)
	cmd := exec.Command("sh", "-c", "mkdir muster-j-pwn muster-j-sym muster-sock-pwn && mkfifo muster-j-pwn/.lock fifo && "+
		"ln -s "+tmp+"/fifo muster-j-sym/.lock && mkfifo muster-sock-pwn/store.sock")
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostileUID, Gid: hostileUID}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("planting as uid %d: %v\n%s", hostileUID, err, out)
	}
	// Let go, at the end, of a process blocked opening them.
	t.Cleanup(func() {
		for _, f := range []string{"muster-j-pwn/.lock", "fifo", "muster-sock-pwn/store.sock"} {
			if fd, err := syscall.Open(filepath.Join(tmp, f), syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				syscall.Close(fd)
			}
		}
	})
	return tmp
}

// No local user can keep another's embedded launcher from running a job:
// not with FIFOs and links in the temporary directory they share.
func TestEmbeddedRunDespiteAnotherUsersTraps(t *testing.T) {
	t.Parallel()
	tmp := sharedTmp(t)
	for _, tt := range []struct {
		name string
		argv []string
	}{
		{"root", []string{launcherBin}},
		{"another user", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", launcherBin}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(tt.argv[0], append(tt.argv[1:], "run", "--nproc", "1", "--no-tag-output", "--", "echo", "ok")...)
			cmd.Dir = "/"
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil || out.String() != "ok\n" {
					t.Fatalf("%v: stdout %q, stderr %q", err, out.String(), errb.String())
				}
			case <-time.After(20 * time.Second):
				tree := processTree(cmd.Process.Pid)
				cmd.Process.Kill()
				t.Fatalf("hung: the launcher did not end in 20 s; its processes (pid ppid state wchan command):\n%s", tree)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(tmp, "fifo")); err != nil {
		t.Errorf("the other user's files are gone: %v", err)
	}
}
