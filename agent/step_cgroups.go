package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"go.uber.org/zap"

	"github.com/musterhq/muster/cgroup"
)

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
