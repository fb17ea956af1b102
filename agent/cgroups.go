package agent

import (
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
