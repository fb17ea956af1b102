package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/zap"
)

// Agents starting on one machine while another makes a job directory leave
// it alone: the maker never finds its directory gone or its lock taken.
func TestStaleJobDirRemovalSparesOneBeingMade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				removeStaleJobDirs(zap.NewNop(), dir)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := range 500 {
		jobDir, lock, err := makeJobDir(dir, fmt.Sprintf("j-%d", i), 0, nil)
		if err != nil {
			t.Fatalf("job directory %d: %v", i, err)
		}
		lock.Close()
		os.RemoveAll(jobDir)
	}
}

// Two agents sharing the directory may hold the same job's node rank (one
// from an earlier round): each gets a directory of its own.
func TestJobDirOfTheSameNodeRankTwice(t *testing.T) {
	dir := t.TempDir()
	first, lock1, err := makeJobDir(dir, "j-1", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock1.Close()
	if err := os.WriteFile(filepath.Join(first, "rank-0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second, lock2, err := makeJobDir(dir, "j-1", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock2.Close()
	if second == first {
		t.Fatalf("both in %s", first)
	}
	if _, err := os.Stat(filepath.Join(first, "rank-0")); err != nil {
		t.Fatalf("the first directory lost its file: %v", err)
	}
}

// Root's job directories stay reachable by their jobs' users even when the
// agent's socket made their parent first, private (mode 0700), as a root
// agent does with /run/muster.
func TestRootJobDirParentStaysEnterable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root's agent runs jobs as other users")
	}
	parent := filepath.Join(t.TempDir(), "muster")
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "jobs")
	if err := prepareTempDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{parent, dir} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o711 {
			t.Errorf("%s: mode %o, want 711: another user's job could not enter its directory", d, got)
		}
	}
}
