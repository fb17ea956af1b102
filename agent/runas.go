package agent

import (
	"fmt"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/envprop"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Who a job's workers run as. The store names the submitter in the
// assignment (run_as) when another local user submitted the job over its
// Unix socket; it read that identity from the socket's peer credentials.
// Without run_as the job is the cluster operator's and runs as the agent's
// own user. An agent running as root runs a user's job as that user (uid,
// gid and supplementary groups, as Slurm does); any other agent refuses
// another user's job. A job never runs as root for someone who is not.

// credential returns what the workers of a job owned by id start with: nil
// to run them as the agent's own user.
func (a *Agent) credential(jobID string, id *musterv1.Identity) (*syscall.Credential, error) {
	if id == nil {
		return nil, nil
	}
	self := os.Geteuid()
	switch {
	case int64(id.GetUid()) == int64(self):
		return nil, nil
	case self != 0:
		return nil, fmt.Errorf("job %s belongs to uid %d%s, and the agent on node %s runs as uid %d: "+
			"only an agent running as root runs other users' jobs", jobID, id.GetUid(), userName(id), a.cfg.Name, self)
	}
	return &syscall.Credential{Uid: id.GetUid(), Gid: id.GetGid(), Groups: append([]uint32{}, id.GetGroups()...)}, nil
}

func userName(id *musterv1.Identity) string {
	if id.GetUser() == "" {
		return ""
	}
	return " (" + id.GetUser() + ")"
}

// asUser runs fn with the file-system identity of cred (fsuid, fsgid and
// supplementary groups), so that fn creates and opens files exactly where
// that user could, and the files it creates are that user's. A nil cred
// runs fn as the agent itself.
//
// The identity is changed on a thread of its own (raw setfsuid, setfsgid
// and setgroups change only the calling thread); the thread stays locked
// and ends with its goroutine, so no other goroutine ever runs with it, and
// the Go runtime creates no thread from a locked one.
func asUser(cred *syscall.Credential, fn func() error) error {
	if cred == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		groups := make([]int, len(cred.Groups))
		for i, g := range cred.Groups {
			groups[i] = int(g)
		}
		if err := unix.Setgroups(groups); err != nil {
			errc <- fmt.Errorf("setgroups: %w", err)
			return
		}
		unix.Setfsgid(int(cred.Gid))
		unix.Setfsuid(int(cred.Uid))
		// setfsuid reports no errors; read the values back instead.
		gid, _ := unix.SetfsgidRetGid(-1)
		uid, _ := unix.SetfsuidRetUid(-1)
		if uid != int(cred.Uid) || gid != int(cred.Gid) {
			errc <- fmt.Errorf("cannot act as uid %d gid %d (fsuid %d, fsgid %d)", cred.Uid, cred.Gid, uid, gid)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// credUID is the uid a job with cred runs as.
func credUID(cred *syscall.Credential) int {
	if cred == nil {
		return os.Geteuid()
	}
	return int(cred.Uid)
}

// openFileAs opens a file as cred's user would.
func openFileAs(cred *syscall.Credential, path string, flag int, perm os.FileMode) (*os.File, error) {
	var f *os.File
	err := asUser(cred, func() error {
		var err error
		f, err = os.OpenFile(path, flag, perm)
		return err
	})
	return f, err
}

// userPath is another user's job's PATH: not root's, which may name root's
// own directories, but the one sudo's secure_path gives every user.
const userPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// userEnviron is the environment a job of another user starts from: never
// the agent's own (it may hold secrets), only what finds programs and a
// locale, and the user's own name and home.
func userEnviron(agentEnv []string, uid uint32) []string {
	out := []string{"PATH=" + userPath}
	for _, name := range []string{"LANG", "LC_ALL", "TZ"} {
		if v, ok := envprop.Lookup(agentEnv, name); ok {
			out = append(out, name+"="+v)
		}
	}
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		out = append(out, "USER="+u.Username, "LOGNAME="+u.Username, "HOME="+u.HomeDir)
	}
	return out
}

// runsAsRoot says whether workers started with cred run as root.
func runsAsRoot(cred *syscall.Credential) bool {
	if cred == nil {
		return os.Geteuid() == 0
	}
	return cred.Uid == 0
}
