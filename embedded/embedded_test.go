package embedded

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/testwait"
)

func TestEmbeddedStoreIsASocketOfItsOwn(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	emb, err := Start(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr := emb.Store.Addr()
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		emb.Close(0)
		t.Fatalf("embedded store at %s, want a Unix socket", addr)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v %v, want 0700", fi.Mode(), err)
	}
	c, err := storeclient.Dial(addr, security.Security{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := c.ListNodes(context.Background(), &musterv1.ListNodesRequest{}); err != nil {
		t.Errorf("own user on the embedded socket: %v", err)
	} else if n := resp.GetNodes(); len(n) != 1 || n[0].GetNode().GetTopology().GetAllowedCpus() == "" {
		// The agent reads its node's topology at start and publishes it.
		t.Errorf("nodes %v: want one, with its topology", n)
	}
	c.Close()
	emb.Close(0)
	if _, err := os.Stat(filepath.Dir(path)); err == nil {
		t.Error("the socket's directory outlived the embedded store")
	}
}

func TestStaleSocketDirectoriesAreRemoved(t *testing.T) {
	parent := t.TempDir()
	stale := filepath.Join(parent, socketDirPrefix+"1")
	live := filepath.Join(parent, socketDirPrefix+"2")
	young := filepath.Join(parent, socketDirPrefix+"3")
	for _, d := range []string{stale, live, young} {
		os.Mkdir(d, 0o700)
	}
	l, err := net.Listen("unix", filepath.Join(live, "store.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.WriteFile(filepath.Join(stale, "store.sock"), nil, 0o600)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	os.Chtimes(live, old, old)
	removeStaleDirs(parent)
	for d, want := range map[string]bool{stale: false, live: true, young: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s kept %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}

// The lifecycle contract: Close twice closes once, and Err is closed once
// the store is over.
func TestCloseTwiceAndErr(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	emb, err := Start(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := emb.Close(0); err != nil {
		t.Fatal(err)
	}
	if err := emb.Close(0); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case err, open := <-emb.Err():
		for open {
			t.Logf("the store's failure: %v", err)
			err, open = <-emb.Err()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Err not closed 10 s after Close")
	}
}

// A failed start undoes what it made: no socket directory, no goroutine of
// muster's (its shim started ahead closed too) is left.
func TestFailedStartLeavesNothing(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if emb, err := Start(ctx, Config{}); err == nil {
		emb.Close(0)
		t.Skip("a start with a cancelled context succeeded: nothing to undo")
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, socketDirPrefix+"*")); len(left) != 0 {
		t.Errorf("a failed start left %v", left)
	}
	testwait.GoroutinesGone(t, 10*time.Second, "github.com/musterhq/muster/")
}
