package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"go.uber.org/zap"

	"github.com/musterhq/muster/cgroup"
)

// workerCgroups opens this agent's cgroup once: each worker then gets a
// cgroup of its own, for its memory limit and for the kernel's word that
// the OOM killer ended it. Without one (an unprivileged agent, a read-only
// hierarchy) workers run where the agent does, as said once in the log,
// and a job with a memory limit is refused.
func (a *Agent) workerCgroups() (*cgroup.Root, error) {
	a.cgroupOnce.Do(func() {
		a.cgroups, a.cgroupErr = cgroup.Open()
		switch {
		case a.cgroupErr != nil:
			a.log.Warn("workers get no cgroup of their own: an OOM kill shows as SIGKILL, and --memory-limit is refused",
				zap.Error(a.cgroupErr))
		default:
			a.log.Info("each worker gets a cgroup of its own", zap.String("under", a.cgroups.Dir()),
				zap.Int("version", int(a.cgroups.Version())), zap.String("agent-moved-to", a.cgroups.Moved()))
		}
	})
	return a.cgroups, a.cgroupErr
}

// makeCgroups makes the job's cgroup on this node and each worker's in it,
// with the job's memory limit.
func (js *jobStart) makeCgroups() error {
	limit := js.asg.GetSpec().GetMemoryLimitBytes()
	root, err := js.a.workerCgroups()
	if err != nil {
		if limit > 0 {
			return fmt.Errorf("--memory-limit: this node's agent cannot make cgroups: %w", err)
		}
		return nil
	}
	// The agent's name keeps apart two agents sharing the machine's cgroups,
	// one of them holding the same node rank of the job from another round.
	name := "muster-" + js.asg.GetJobId() + "-" + nodeDirName(js.a.cfg.Name) + "-node" + strconv.Itoa(int(js.asg.GetNodeRank()))
	job, err := root.NewJob(name)
	if errors.Is(err, os.ErrExist) {
		// Left by an agent that died with the job: its processes are gone
		// with their shim, so the cgroup can go.
		if old, oerr := root.OpenJob(name); oerr == nil && old.Remove() == nil {
			job, err = root.NewJob(name)
		}
	}
	if err != nil {
		if limit > 0 {
			return fmt.Errorf("--memory-limit: %w", err)
		}
		js.a.log.Warn("job without cgroups", zap.String("job", js.asg.GetJobId()), zap.Error(err))
		return nil
	}
	js.cgroup = job
	for _, w := range js.workers {
		if w.cgroup, err = job.Worker("rank-"+strconv.Itoa(w.plan.rank), limit); err != nil {
			return err
		}
	}
	if root.Version() == cgroup.V1 {
		js.spec.CgroupV1Home = root.Dir()
	}
	js.spec.JobCgroup = job.Dir()
	return nil
}

// removeCgroups removes the job's cgroups once its processes have ended.
func (js *jobStart) removeCgroups() {
	if js.cgroup == nil {
		return
	}
	if err := js.cgroup.Remove(); err != nil {
		js.a.log.Warn("job cgroup left behind", zap.String("job", js.asg.GetJobId()), zap.Error(err))
	}
	js.cgroup = nil
}
