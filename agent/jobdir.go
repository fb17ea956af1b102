package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A job's directory on a node (its hostfile) is TempDir/muster-JOBID.NODERANK
// (several agents may share a machine, and its temporary directory). It
// holds a lock file, locked while the job's agent or shim lives, so that an
// agent starting later removes what a crash left and nothing in use.
const (
	jobDirPrefix = "muster-"
	jobDirNew    = ".muster-new-" // a job directory being made
	jobDirLock   = ".lock"
)

// makeJobDir creates a job's directory and returns it with its lock held.
// The directory is made and locked under a temporary name, then renamed:
// an agent starting meanwhile never sees it unlocked.
func makeJobDir(tempDir, jobID string, nodeRank int32) (string, *os.File, error) {
	dir := filepath.Join(tempDir, fmt.Sprintf("%s%s.%d", jobDirPrefix, jobID, nodeRank))
	tmp, err := os.MkdirTemp(tempDir, jobDirNew)
	if err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(tmp, jobDirLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			err = os.Rename(tmp, dir)
		}
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return dir, lock, nil
}

// removeStaleJobDirs removes job directories whose lock nobody holds: what
// an agent and its shims left when they were killed.
func removeStaleJobDirs(log *zap.Logger, tempDir string) {
	// One being made right now may have its lock file and not its lock yet
	// (another agent on this machine makes it): only what a crash left, a
	// minute old, goes.
	news, _ := filepath.Glob(filepath.Join(tempDir, jobDirNew+"*"))
	for _, dir := range news {
		if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Minute {
			os.RemoveAll(dir)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(tempDir, jobDirPrefix+"j-*"))
	for _, dir := range dirs {
		lock, err := os.Open(filepath.Join(dir, jobDirLock))
		if err != nil {
			if fi, serr := os.Stat(dir); serr == nil && time.Since(fi.ModTime()) > time.Minute {
				os.RemoveAll(dir)
			}
			continue
		}
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			log.Info("removing a job directory left by a crash", zap.String("dir", dir))
			os.RemoveAll(dir)
		}
		lock.Close()
	}
}
