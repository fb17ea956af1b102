package agent

import (
	"errors"
	"syscall"

	"github.com/musterhq/muster/cgroup"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/supervise"
)

// jobStart is one assignment's start on this node: what its steps make, for
// the steps after them and for the job's run.
type jobStart struct {
	a   *Agent
	asg *musterv1.Assignment
	sup *Supervisor

	cred      *syscall.Credential
	workdir   string
	files     jobFiles
	hostfile  string
	addrsFile string
	addrs     []string // NodeAddrs, unless the roster is in addrsFile or absent
	rasAddr   string   // the job's NCCL RAS address here, when one was free
	plans     []workerPlan
	mpi       *pmiService
	workers   []*worker        // one per plan
	spec      supervise.Spec   // the shim's workers
	started   []*worker        // the workers in spec, in its order
	group     *supervise.Group // the running workers
	cgroup    *cgroup.Job      // the workers' cgroups, when the agent makes them
	hang      *hangWatch       // with a hang timeout
}

// errStopping is a start that a stop came before.
var errStopping = errors.New("the job was stopped before its workers started")

// steps are a job's life on this node, in order: each step's do makes its
// part at the start, and its undo takes it back at the job's end, however
// it ends, or once a later step failed. Each step with more than a line to
// it lives in its own file, step_*.go.
func (js *jobStart) steps() []step {
	return []step{
		// The ports were made by ReservePorts: the start only gives them
		// back. The TCPStore, made then too, is the store's to release when
		// no round needs it (rounds.go).
		{name: "ports", undo: js.releasePorts},
		{name: "assignment", do: js.check},
		// The node checks its health once the assignment is checked (it
		// knows the job's user), before it makes anything of the job's.
		{name: "health", do: js.checkHealth},
		{name: "job directory", do: js.makeJobDir, undo: js.removeJobDir},
		// Its files are in the job directory, whose undo takes them.
		{name: "hostfile", do: js.writeRoster},
		{name: "stdin", do: js.openStdin, undo: js.closeStdin},
		// The commands hold their workers' cores (--cpu-bind cores) until the job's end.
		{name: "commands", do: js.planWorkers, undo: js.releaseCores},
		// In the job directory too.
		{name: "heartbeat files", do: js.makeHeartbeats},
		{name: "cgroups", do: js.makeCgroups, undo: js.removeCgroups},
		{name: "log files", do: js.openLogs, undo: js.closeLogs},
		{name: "PMI service", do: js.startPMI, undo: js.closePMI},
		{name: "pipes and PMI sockets", do: js.makePipes, undo: js.closePipes},
		// The workers end by themselves or by a stop: the job's end waits
		// for them (Supervisor.run) before the undos run.
		{name: "workers", do: js.startWorkers},
	}
}

func (js *jobStart) releasePorts() { js.a.releasePorts(js.asg.GetRoundId()) }

func (js *jobStart) startPMI() error {
	var err error
	js.mpi, err = js.a.startPMI(js.asg)
	return err
}

func (js *jobStart) closePMI() { js.mpi.close() }
