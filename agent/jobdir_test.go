package agent

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/zap"
)

// Agents starting on one machine while another makes a job directory leave
// it alone: the maker never finds its directory gone or its lock taken.
func TestStaleJobDirRemovalSparesOneBeingMade(t *testing.T) {
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
