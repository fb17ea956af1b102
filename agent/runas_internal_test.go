package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

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
