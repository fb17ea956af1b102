package agent

import (
	"errors"
	"net"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/kv"
	"github.com/musterhq/muster/tcpstore"
)

// torchStore is a job's PyTorch TCPStore, served by this agent while the
// node is the job's node rank 0: on one port for every such round, each
// round on a fresh space, so that no rank binds MASTER_PORT and the store
// outlives a restart.
type torchStore struct {
	srv   *tcpstore.Server
	kv    *kv.Memory // its own, so that its bounds are the job's alone
	port  int32
	round string // whose space it serves
}

var errClosing = errors.New("the agent is closing")

// torchStorePort serves job's TCPStore for round, opening it on the job's
// first round here, and returns its port.
func (a *Agent) torchStorePort(job, round string) (int32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return 0, errClosing
	}
	ts := a.torchStores[job]
	if ts == nil {
		l, err := tcpstore.Listen(net.JoinHostPort(a.cfg.Addr, "0"))
		if err != nil {
			return 0, err
		}
		ts = &torchStore{srv: tcpstore.NewServer(l, a.torchConns, a.log.With(zap.String("job", job))),
			kv: kv.NewMemoryWith(tcpstore.Limits), port: int32(l.Addr().(*net.TCPAddr).Port)}
		ts.srv.Start()
		a.torchStores[job] = ts
		a.log.Info("serving the job's TCPStore", zap.String("job", job), zap.Int32("port", ts.port))
	}
	if ts.round != round {
		// A new round starts on an empty store; the last round's clients
		// are closed as their space goes.
		ts.srv.Use(ts.kv.Space(round))
		if ts.round != "" {
			ts.kv.Drop(ts.round)
		}
		ts.round = round
	}
	return ts.port, nil
}

// torchStoreJobs are the jobs whose TCPStore this agent serves, for its
// registration: the store says which of them no job needs any more.
func (a *Agent) torchStoreJobs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	jobs := make([]string, 0, len(a.torchStores))
	for job := range a.torchStores {
		jobs = append(jobs, job)
	}
	return jobs
}

// releaseTorchStore closes job's TCPStore, if this agent serves it.
func (a *Agent) releaseTorchStore(job string) {
	a.mu.Lock()
	ts := a.torchStores[job]
	delete(a.torchStores, job)
	a.mu.Unlock()
	if ts == nil {
		return
	}
	if err := ts.srv.Close(); err != nil {
		a.log.Warn("closing the job's TCPStore", zap.String("job", job), zap.Error(err))
	}
	if ts.round != "" {
		ts.kv.Drop(ts.round)
	}
	a.log.Info("the job's TCPStore closed", zap.String("job", job))
}

// torchConnLimit bounds the connections of all of an agent's TCPStores
// together: below its file descriptors, with room for its other work.
func torchConnLimit() *tcpstore.ConnLimit {
	n := uint64(tcpstore.MaxConnections)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		n = min(n, max(rl.Cur/2, rl.Cur-min(rl.Cur, 4096)))
	}
	return tcpstore.NewConnLimit(int(n))
}
