package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"go.uber.org/zap"

	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/pmi"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// pmiService is an MPI job's process manager on this node (--mpi): one
// pmi.Job for the node's ranks, across nodes through the store's KV, which
// it reaches with the job's own credential (never the cluster token).
type pmiService struct {
	job    *pmi.Job
	client *storeclient.Client
}

// startPMI makes the PMI service of an assignment that asks for one, or
// returns nil.
func (a *Agent) startPMI(asg *musterv1.Assignment) (*pmiService, error) {
	if asg.GetSpec().GetMpi() != jobspec.MPICH {
		return nil, nil
	}
	sec := security.Security{JobToken: asg.GetJobToken(), CAFile: a.cfg.Security.CAFile, TLS: a.cfg.Security.TLS}
	c, err := storeclient.Dial(a.storeAddrNow(), sec)
	if err != nil {
		return nil, fmt.Errorf("--mpi: the job's KV: %w", err)
	}
	nnodes, nproc := int(asg.GetNnodes()), int(asg.GetNproc())
	return &pmiService{client: c, job: &pmi.Job{
		KVSName: "muster-" + asg.GetJobId(),
		Size:    int(asg.GetWorldSize()),
		Mapping: pmi.ProcessMapping(nnodes, nproc),
		Local:   nproc,
		// Each round's keys and barriers are its own: a restarted job's
		// ranks must not meet the last round's barriers already complete.
		Backend: pmi.StoreBackend{KV: c, Prefix: "pmi/" + asg.GetRoundId() + "/", Node: a.cfg.Name, Nodes: nnodes},
		Logger:  a.log.With(zap.String("job", asg.GetJobId())),
	}}, nil
}

func (p *pmiService) close() {
	if p != nil {
		p.client.Close()
	}
}

// pmiConn is one MPI worker's PMI connection: the worker's end goes to the
// shim, the agent serves its own until the worker exits.
type pmiConn struct {
	worker *os.File
	conn   net.Conn
	cancel context.CancelFunc
	result chan pmi.Result
}

func newPMIConn() (*pmiConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("PMI socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "pmi")
	defer ours.Close() // FileConn holds its own copy
	conn, err := net.FileConn(ours)
	if err != nil {
		syscall.Close(fds[1])
		return nil, fmt.Errorf("PMI socketpair: %w", err)
	}
	return &pmiConn{worker: os.NewFile(uintptr(fds[1]), "pmi-worker"), conn: conn, result: make(chan pmi.Result, 1)}, nil
}

// serve answers rank's PMI until its connection ends. An abort stops the
// job at once: MPICH 4.0.2 does not exit after MPI_Abort, it waits to be
// killed.
func (s *Supervisor) servePMI(ctx context.Context, job *pmi.Job, pc *pmiConn, rank int) {
	ctx, pc.cancel = context.WithCancel(ctx)
	go func() {
		res := job.Serve(ctx, pc.conn, rank)
		if res.Aborted {
			s.log.Info("rank called MPI_Abort", zap.String("job", s.job), zap.Int("rank", rank), zap.Int("exit-code", res.ExitCode))
			s.Stop(s.killAt)
		}
		pc.result <- res
	}()
}

// outcome ends the service of an exited worker and returns its exit as
// its PMI connection tells it: an abort is the rank's own failure, with
// the code it gave, however it was then stopped; a connection that broke
// or closed before MPI_Finalize fails a rank that exited 0.
func (pc *pmiConn) outcome(st exitStatus) exitStatus {
	pc.cancel()
	res := <-pc.result
	switch {
	case res.Aborted:
		return exitStatus{code: res.ExitCode, aborted: true, err: fmt.Sprintf("called MPI_Abort with exit code %d", res.ExitCode)}
	case res.Finalized || res.Err == nil || st.failed():
		return st
	case !res.Spoke:
		st.err = "exited with code 0 without a word of PMI: not an MPICH program? (Open MPI programs need --mpi openmpi)"
	case errors.Is(res.Err, pmi.ErrNotFinalized) || errors.Is(res.Err, context.Canceled):
		// Closed by its exit, or cancelled here once it exited: either way first.
		st.err = "exited with code 0 without MPI_Finalize (its PMI connection closed first)"
	default:
		st.err = validText("exited with code 0, but its PMI connection failed: " + res.Err.Error())
	}
	return st
}

// close closes both ends of a connection that will not be served.
func (pc *pmiConn) close() {
	pc.worker.Close()
	pc.conn.Close()
}
