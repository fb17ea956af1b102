package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
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
	// peers asks who made connections from the job's other nodes.
	peers *torchConnChecker

	amu   sync.Mutex
	users *torchUsers // who may connect in round; set by the round's start
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
		limits := tcpstore.Limits
		limits.Shared = a.torchBytes
		ts = &torchStore{srv: tcpstore.NewServer(l, a.torchConns, a.log.With(zap.String("job", job))),
			kv: kv.NewMemoryWith(limits), port: int32(l.Addr().(*net.TCPAddr).Port),
			peers: newTorchConnChecker(a.ctx, a.log.With(zap.String("job", job)), a.askTorchConns(job))}
		ts.srv.Admit(ts.admit)
		ts.srv.Start()
		a.torchStores[job] = ts
		a.log.Info("serving the job's TCPStore", zap.String("job", job), zap.Int32("port", ts.port))
	}
	if ts.round != round {
		// A new round starts on an empty store; the last round's clients
		// are closed as their space goes.
		ts.srv.Use(ts.kv.Space(round))
		ts.amu.Lock()
		ts.users = newTorchUsers(round)
		ts.amu.Unlock()
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

// torchStoreBytes bounds the bytes of all of an agent's TCPStores together,
// on top of each job's own bound (tcpstore.Limits).
const torchStoreBytes = 512 << 20

// Who may use a job's TCPStore. PyTorch's clients carry no credential, so
// the store goes by who connects: processes of the job's user, on this host
// or on another of the round's nodes. On this host the kernel says who owns
// the other end of a connection; from another of the round's nodes (by its
// address), that node's agent, which sees the socket there, says it when
// asked through the store (torchconns.go); from any other host, nobody.
type torchUsers struct {
	round string
	ready chan struct{} // closed once the round's start set the rest
	uid   uint32        // the job's user
	nodes map[netip.Addr]bool
}

func newTorchUsers(round string) *torchUsers {
	return &torchUsers{round: round, ready: make(chan struct{})}
}

// torchAdmitWait bounds how long a connection waits for its round's start
// to say who may connect: ranks of other nodes may start first.
const torchAdmitWait = 60 * time.Second

// allowTorchStoreUsers says who may use job's TCPStore in asg's round, if
// this agent serves it; a round's connections wait until it has.
func (a *Agent) allowTorchStoreUsers(asg *musterv1.Assignment) {
	a.mu.Lock()
	ts := a.torchStores[asg.GetJobId()]
	a.mu.Unlock()
	if ts == nil {
		return
	}
	uid := jobUID(asg)
	nodes := map[netip.Addr]bool{}
	for _, addr := range asg.GetNodeAddrs() {
		if ip, err := netip.ParseAddr(addr); err == nil {
			nodes[ip.Unmap()] = true
		}
	}
	ts.amu.Lock()
	defer ts.amu.Unlock()
	if u := ts.users; u != nil && u.round == asg.GetRoundId() {
		select {
		case <-u.ready:
		default:
			u.uid, u.nodes = uid, nodes
			close(u.ready)
		}
	}
}

// admit decides on a connection to the store, once its round's start has
// said who may connect.
func (ts *torchStore) admit(ctx context.Context, nc net.Conn) error {
	ts.amu.Lock()
	u := ts.users
	ts.amu.Unlock()
	if u == nil {
		return errors.New("no round yet")
	}
	t := time.NewTimer(torchAdmitWait)
	defer t.Stop()
	select {
	case <-u.ready:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("round %s never started here", u.round)
	}
	return u.allowed(nc, security.TCPPeerOwner, isLocalAddr, func(client, server netip.AddrPort) error {
		return ts.peers.check(ctx, u.round, client, server)
	})
}

// allowed says why nc may not use the store, if it may not. owner finds
// the uid of a local connection's other end; local says whether an address
// is this host's; remote asks the agent of the node a connection comes
// from who made it there.
func (u *torchUsers) allowed(nc net.Conn, owner func(net.Conn) (uint32, bool, error), local func(netip.Addr) bool,
	remote func(client, server netip.AddrPort) error) error {
	uid, found, err := owner(nc)
	if err != nil {
		return err
	}
	if found {
		if uid != u.uid {
			return fmt.Errorf("a process of uid %d, not of the job's user (uid %d)", uid, u.uid)
		}
		return nil
	}
	client, server := tcpAddrPort(nc.RemoteAddr()), tcpAddrPort(nc.LocalAddr())
	ip := client.Addr()
	switch {
	case !u.nodes[ip]:
		return fmt.Errorf("%s is not one of the job's nodes", ip)
	case ip.IsLoopback() || local(ip):
		// This host's own address, from a socket that is gone already.
		return fmt.Errorf("a local connection whose socket has gone")
	}
	// The address says only which node: any of its users may connect from
	// it. That node's agent sees the socket, and says whose it is.
	return remote(client, server)
}

// tcpAddrPort is a TCP address without IPv4 mapping or zone; the zero
// AddrPort for another kind of address.
func tcpAddrPort(a net.Addr) netip.AddrPort {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// jobUID is the user whose processes asg's workers are on this node: its
// submitter, or for the cluster operator's jobs the agent's own user.
func jobUID(asg *musterv1.Assignment) uint32 {
	if id := asg.GetRunAs(); id != nil {
		return id.GetUid()
	}
	return uint32(os.Geteuid())
}

// isLocalAddr says whether ip is one of this host's addresses.
func isLocalAddr(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // unknown: taken as local, where the owner must be found
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}
