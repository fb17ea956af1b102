package agent

import (
	"fmt"
	"os"
)

// makeJobDir makes the job's directory on this node, its lock held: its
// hostfile, heartbeat and error files, the shim's lock.
func (js *jobStart) makeJobDir() error {
	var err error
	js.files.dir, js.files.lock, err = makeJobDir(js.a.cfg.TempDir, js.asg.GetJobId(), js.asg.GetNodeRank(), js.cred)
	if err != nil {
		return fmt.Errorf("job directory: %w", err)
	}
	return nil
}

// removeJobDir removes the job's directory once its workers have ended and
// what they left there was read, or once they will not start.
func (js *jobStart) removeJobDir() {
	if js.files.dir != "" {
		// The lock first, then the directory, as the job's end always had
		// it: the other order made loaded nodes lose their store (twenty
		// 30-node jobs at once on two CPUs, TestNetnsConcurrentJobs).
		js.files.lock.Close()
		os.RemoveAll(js.files.dir)
	}
}
