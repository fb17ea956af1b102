package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/ownfile"

	"github.com/musterhq/muster/paths"
)

// A job's directory on a node (its hostfile) is TempDir/muster-JOBID.NODERANK
// (several agents may share a machine, and its job directories). It holds a
// lock file, locked while the job's agent or shim lives, so that an agent
// starting later removes what a crash left and nothing in use.
//
// TempDir is private: only the agent's user may make entries in it, so no
// other local user can plant a directory, a FIFO or a link there for the
// agent to trip on. A job directory is its job's user's, who may change what
// is inside: the agent opens nothing there that could block or lead elsewhere.
const (
	jobDirPrefix = "muster-"
	jobDirNew    = ".muster-new-" // a job directory being made
	jobDirLock   = ".lock"
)

// DefaultTempDir is where an agent keeps its job directories: under
// systemd's RuntimeDirectory when the unit has one, /run/muster/jobs as root,
// else this user's runtime directory ($XDG_RUNTIME_DIR/muster/jobs, or
// /tmp/muster-UID/jobs without one).
func DefaultTempDir() string { return filepath.Join(paths.OS().RuntimeDir(), "jobs") }

// prepareTempDir makes dir if need be and checks that it is private: a
// directory of this user that no one else may change, in a parent where
// no one else may replace it. Root's may be entered by all (mode 0711): its
// jobs' users read their own job directories there.
func prepareTempDir(dir string) error {
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o711
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("job directories: %w", err)
	}
	if err := checkOwnDir(dir, false); err != nil {
		return err
	}
	if err := checkOwnDir(filepath.Dir(dir), true); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		return enterable(filepath.Dir(dir))
	}
	return nil
}

// enterable lets every user pass through root's parent of the job
// directories (/run/muster), which the agent's socket may have made first
// with mode 0700: a job's user could not reach their own job directory.
func enterable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("job directories: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o011 == 0o011 {
		return nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
		return fmt.Errorf("job directories: let every user enter %s: %w", dir, err)
	}
	return nil
}

// checkOwnDir says why dir is not private, if it is not: it must be a real
// directory of this user (or root) that no one else may write to, unless,
// for a parent, it is root's and sticky, as /tmp is.
func checkOwnDir(dir string, parent bool) error {
	if err := ownfile.CheckDir(dir, os.Geteuid(), 0o022, parent); err != nil {
		return fmt.Errorf("job directories: %w; give a directory only this agent's user may change", err)
	}
	return nil
}

// makeJobDir creates a job's directory and returns it with its lock held.
// The directory is made and locked under a temporary name, then renamed:
// an agent starting meanwhile never sees it unlocked. A job of another user
// gets the directory (mode 0700) as theirs; the lock stays the agent's.
func makeJobDir(tempDir, jobID string, nodeRank int32, cred *syscall.Credential) (string, *os.File, error) {
	dir := filepath.Join(tempDir, fmt.Sprintf("%s%s.%d", jobDirPrefix, jobID, nodeRank))
	tmp, err := os.MkdirTemp(tempDir, jobDirNew)
	if err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(tmp, jobDirLock), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err == nil {
		if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil && cred != nil {
			err = os.Lchown(tmp, int(cred.Uid), int(cred.Gid))
		}
		if err == nil {
			err = os.Rename(tmp, dir)
			if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
				// Another agent sharing this directory (a second agent on
				// the machine) holds this node rank's name from an earlier
				// round: the temporary name's random part sets this one apart.
				dir += "." + strings.TrimPrefix(filepath.Base(tmp), jobDirNew)
				err = os.Rename(tmp, dir)
			}
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
// an agent and its shims left when they were killed. It never blocks on
// what a job's user may have put in their directory: a lock that is not
// the agent's own regular file marks the directory as not in use.
func removeStaleJobDirs(log *zap.Logger, tempDir string) {
	entries, err := os.ReadDir(tempDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(tempDir, e.Name())
		fi, err := os.Lstat(dir)
		switch {
		case err != nil || !fi.IsDir():
		case strings.HasPrefix(e.Name(), jobDirNew):
			// One being made right now may have its lock file and not its
			// lock yet (another agent on this machine makes it): only what
			// a crash left, a minute old, goes.
			if time.Since(fi.ModTime()) > time.Minute {
				os.RemoveAll(dir)
			}
		case strings.HasPrefix(e.Name(), jobDirPrefix+"j-"):
			if inUse, err := jobDirLocked(filepath.Join(dir, jobDirLock)); !inUse &&
				(err == nil || time.Since(fi.ModTime()) > time.Minute) {
				log.Info("removing a job directory left by a crash", zap.String("dir", dir), zap.NamedError("lock", err))
				os.RemoveAll(dir)
			}
		}
	}
}

// jobDirLocked says whether the lock file at path is held. It opens the
// file without following a link and without waiting (a FIFO opens at once),
// and takes only a regular file of the agent's own user as a lock.
func jobDirLocked(path string) (bool, error) {
	f, err := ownfile.Open(path, os.Geteuid())
	if err != nil {
		return false, err
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil, nil
}

// jobFiles is what a job has on this node besides its processes: its
// directory (held by a lock until its shim ends) and its log directory.
type jobFiles struct {
	dir    string
	lock   *os.File
	logDir string
	feed   *stdinFeed
}

// writeFile creates path and writes it with emit.
func writeFile(path string, emit func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = emit(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
