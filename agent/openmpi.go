package agent

import (
	"fmt"
	"os"
	"syscall"

	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/openmpi"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// openMPIArgv is the command of an Open MPI job's one worker on this node:
// mpirun's (on node rank 0) or its daemon's, run by this binary.
func (a *Agent) openMPIArgv(asg *musterv1.Assignment, in envprop.Input, jobDir string, cred *syscall.Credential, argv []string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--mpi openmpi: this agent's binary: %w", err)
	}
	in.LocalRank = 0
	n := openmpi.Node{Self: self, Dir: jobDir, Names: asg.GetNodeNames(), Slots: int(asg.GetSpec().GetNproc()),
		Env: envprop.Build(in), Argv: argv, Root: runsAsRoot(cred)}
	err = asUser(cred, func() (err error) {
		argv, err = openmpi.Argv(int(asg.GetNodeRank()), n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("--mpi openmpi: %w", err)
	}
	return argv, nil
}
