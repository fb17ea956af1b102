// Package storeserver serves a store (package rendezvous) over gRPC: the
// agents', launchers' and workers' services, each call authenticated and
// authorized, over TCP and the store's Unix socket.
package storeserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/jobhistory"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/replica"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storewire"
)

// Bounds on gRPC traffic beyond those the clients share
// (storewire.KeepaliveTime and the rest).
const (
	maxStreams     = 4096
	maxWaitTimeout = time.Hour
)

// Config configures a Server.
type Config struct {
	Logger *zap.Logger
	// ListenAddr is the TCP host:port; port 0 picks a free one. Calls over
	// TCP carry the cluster token, or a job's credential.
	ListenAddr string
	// Listener, when set, is used instead of ListenAddr. The server closes
	// it on Close; a failed Start leaves it open, to its caller.
	Listener net.Listener
	// Socket, when set, is the path of a Unix socket the store also serves,
	// with or without TCP. Its callers are known by their peer credentials:
	// the store's own user and root are the cluster operator.
	Socket string
	// SocketUsers lets every other local user use the socket too (mode
	// 0666); their jobs run as them, and they see only their own jobs. Only
	// a store running as root may allow it.
	SocketUsers bool
	// AdvertiseAddr is the address workers use for the store; it defaults to
	// the TCP listener's address, or the socket.
	AdvertiseAddr string
	Security      security.Security
	// ShutdownTimeout bounds the graceful part of Close.
	ShutdownTimeout time.Duration
	// InProcess says the store serves its own process (the embedded
	// default), over its socket alone.
	InProcess bool
	// DeadPeerAfter is how long the peer of a TCP connection may leave the
	// store's keepalive probes or data unacknowledged before the store drops
	// the connection: its host is down or cut off. A peer that is merely
	// stopped, as a launcher suspended with Ctrl-Z, still answers TCP and
	// keeps its connection and its job. 30 s when 0.
	DeadPeerAfter time.Duration
	// SessionGrace is how long a node whose connection broke keeps its jobs
	// while its agent reconnects; 10 s by default.
	SessionGrace time.Duration
	// DetachGrace is how long a job whose launcher went away waits for it
	// to follow again before it is stopped; 10 s by default.
	DetachGrace time.Duration
	// AgentGone, when set, says whether a node's agent is gone once its
	// stream broke, so that its node is lost at once (liveness.go).
	AgentGone func(name string, timeout time.Duration) bool
	// Refused, when set, hears of every state change the store refuses (a
	// bug; tests fail on it).
	Refused func(error)
	// NodeTimeout lets the store find silent nodes itself (see
	// rendezvous.StoreConfig).
	NodeTimeout time.Duration
	// OwnNode names the node whose agent shares the store's process.
	OwnNode string
	// FenceAfter and RenewSilence are the store's lease bounds (see
	// rendezvous.StoreConfig); 0 takes the defaults.
	FenceAfter   time.Duration
	RenewSilence time.Duration
	// History keeps the finished jobs, in a file under its Dir that outlives
	// the store's process (in memory without one).
	History jobhistory.Config
	// StatsHandler, when set, sees every RPC's traffic (the scale benchmark
	// counts the store's bytes with it).
	StatsHandler stats.Handler
	// Recorder, when set, hears of the store's events that metrics count
	// (see rendezvous.Recorder).
	Recorder rendezvous.Recorder
	// Replicas, when set, are the store addresses of every replica of a
	// replicated store, this one's (AdvertiseAddr) among them; its raft log
	// lives under ReplicaDir. Empty: a lone store.
	Replicas   []string
	ReplicaDir string
	// ReplicaJoining and ReplicaAlone: see replica.Config's Joining, Alone.
	ReplicaJoining, ReplicaAlone bool
	// HeartbeatTimeout is the replicas' raft heartbeat (package replica).
	HeartbeatTimeout time.Duration
}

// Server serves a Store over gRPC.
type Server struct {
	musterv1.UnimplementedAgentsServer
	musterv1.UnimplementedJobsServer
	musterv1.UnimplementedKVServer
	musterv1.UnimplementedReplicasServer
	cfg     Config
	replica *replica.Replica // nil for a lone store
	log     *zap.Logger
	store   *rendezvous.Store
	history *jobhistory.History
	lis     net.Listener // TCP; nil when the store serves only its socket
	sock    net.Listener // the Unix socket, when there is one
	grpc    *grpc.Server
	uid     uint32 // the store's own user
	token   []byte // "Bearer " + the cluster token; nil without one
	logs    logRelays
	torch   torchChecks

	errc      chan error
	closeOnce sync.Once
}

// Start listens, then serves in the background: the store takes calls once
// Start returns. ctx bounds the start only; a failure to serve later comes
// on Err. A failed Start undoes what it made, and leaves a Config.Listener
// to its caller; once Start succeeds, Close closes that listener too.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg, err = checkConfig(cfg); err != nil {
		return nil, err
	}
	tcpCreds, err := cfg.Security.TCPCredentials()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, uid: uint32(os.Geteuid()), errc: make(chan error, 2)}
	defer func() {
		if err != nil {
			s.undoStart()
		}
	}()
	if err := s.listen(ctx); err != nil {
		return nil, err
	}
	if err := s.openStore(); err != nil {
		return nil, err
	}
	s.newGRPC(tcpCreds)
	s.serve()
	return s, nil
}

// checkConfig refuses a configuration the store cannot serve and fills in
// its defaults.
func checkConfig(cfg Config) (Config, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	if cfg.History.Logger == nil {
		cfg.History.Logger = cfg.Logger
	}
	if cfg.ListenAddr == "" && cfg.Listener == nil && cfg.Socket == "" {
		return cfg, errors.New("store: nothing to listen on: give a TCP address or a socket")
	}
	if cfg.SocketUsers && os.Geteuid() != 0 {
		return cfg, errors.New("store: only a store running as root may serve other users (it runs their jobs as them)")
	}
	return cfg, nil
}

// listen takes the TCP listener (the one given, or a new one on
// ListenAddr) and the Unix socket's.
func (s *Server) listen(ctx context.Context) error {
	s.lis = s.cfg.Listener
	if s.lis == nil && s.cfg.ListenAddr != "" {
		if err := security.CheckListen(s.cfg.ListenAddr, s.cfg.Security); err != nil {
			return err
		}
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.ListenAddr)
		if err != nil {
			return fmt.Errorf("store: listen on %s: %w", s.cfg.ListenAddr, err)
		}
		s.lis = lis
	}
	if s.cfg.Socket != "" {
		sock, err := security.ListenUnix(s.cfg.Socket, s.cfg.SocketUsers)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		s.sock = sock
	}
	return nil
}

// advertiseAddr is where workers and other nodes reach the store:
// AdvertiseAddr, else the TCP listener's address, else the socket's.
func (s *Server) advertiseAddr() string {
	switch {
	case s.cfg.AdvertiseAddr != "":
		return s.cfg.AdvertiseAddr
	case s.lis != nil:
		return s.lis.Addr().String()
	}
	return security.SocketAddr(s.cfg.Socket)
}

// openStore makes the state machine, its history and, for a replicated
// store, the replica that applies its commands.
func (s *Server) openStore() error {
	cfg := s.cfg
	storeCfg := rendezvous.StoreConfig{Logger: cfg.Logger, Addr: s.advertiseAddr(), SessionGrace: cfg.SessionGrace, DetachGrace: cfg.DetachGrace,
		AgentGone: cfg.AgentGone, Refused: cfg.Refused, FenceAfter: cfg.FenceAfter, RenewSilence: cfg.RenewSilence,
		NodeTimeout: cfg.NodeTimeout, OwnNode: cfg.OwnNode, Recorder: cfg.Recorder}
	var rep *replica.Replica
	if len(cfg.Replicas) > 0 {
		bind := ""
		if cfg.ListenAddr != "" {
			bind, _, _ = net.SplitHostPort(cfg.ListenAddr)
		}
		var err error
		rep, err = replica.New(replica.Config{Logger: cfg.Logger, Addr: storeCfg.Addr, BindHost: bind, Peers: cfg.Replicas,
			DataDir: cfg.ReplicaDir, Security: cfg.Security, HeartbeatTimeout: cfg.HeartbeatTimeout,
			Joining: cfg.ReplicaJoining, Alone: cfg.ReplicaAlone})
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		storeCfg.Log, storeCfg.ID = rep, rep.StoreID()
	}
	s.history = jobhistory.Open(cfg.History)
	storeCfg.Record = s.history.Propose
	s.store = rendezvous.NewStore(storeCfg)
	if rep != nil {
		// A replica that fails to start undoes its own start.
		if err := rep.Start(s.store); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		s.replica = rep
	}
	if cfg.Security.Token != "" {
		s.token = []byte("Bearer " + cfg.Security.Token)
	}
	return nil
}

// newGRPC makes the gRPC server of the store's services, each call
// authenticated and authorized.
func (s *Server) newGRPC(tcpCreds credentials.TransportCredentials) {
	opts := []grpc.ServerOption{
		grpc.Creds(security.TransportCreds{TCP: tcpCreds}),
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
		grpc.MaxRecvMsgSize(storewire.MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: storewire.KeepaliveTime, PermitWithoutStream: true}),
	}
	if s.cfg.StatsHandler != nil {
		opts = append(opts, grpc.StatsHandler(s.cfg.StatsHandler))
	}
	s.grpc = grpc.NewServer(opts...)
	musterv1.RegisterAgentsServer(s.grpc, s)
	musterv1.RegisterJobsServer(s.grpc, s)
	musterv1.RegisterKVServer(s.grpc, s)
	musterv1.RegisterReplicasServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, health.NewServer())
}

// serve serves every listener in the background; Err is closed once all
// have stopped.
func (s *Server) serve() {
	var tcp net.Listener
	if s.lis != nil {
		// No keepalive pings from the store: a stopped process cannot answer
		// them, though its host does (see DeadPeerAfter).
		tcp = deadPeerListener{Listener: s.lis, after: cmp.Or(s.cfg.DeadPeerAfter, storewire.AgentKeepaliveTimeout)}
	}
	var serving sync.WaitGroup
	for _, l := range []net.Listener{tcp, s.sock} {
		if l == nil {
			continue
		}
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := s.grpc.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.errc <- fmt.Errorf("store stopped serving %s: %w", l.Addr(), err)
			}
		}()
	}
	go func() {
		serving.Wait()
		close(s.errc)
	}()
	if s.lis != nil {
		s.log.Info("store listening", zap.String("addr", s.lis.Addr().String()))
	}
	if s.sock != nil {
		s.log.Info("store socket", zap.String("path", s.cfg.Socket), zap.Bool("other-users", s.cfg.SocketUsers))
	}
}

// undoStart closes what a failed Start made, a listener it was given
// aside: that one stays its caller's.
func (s *Server) undoStart() {
	if s.replica != nil {
		if err := s.replica.Close(); err != nil {
			s.log.Warn("store replica not closed cleanly", zap.Error(err))
		}
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.history != nil {
		if err := s.history.Close(); err != nil {
			s.log.Error("job history not closed", zap.Error(err))
		}
	}
	if s.lis != nil && s.cfg.Listener == nil {
		s.lis.Close()
	}
	if s.sock != nil {
		s.sock.Close()
	}
}

// Err delivers why a listener stopped serving before Close (its Accept
// failed), and is closed once serving has stopped on every listener.
func (s *Server) Err() <-chan error { return s.errc }

// Addr is the address the server listens on: its TCP address, or its
// socket's (unix:///path) when it serves only that.
func (s *Server) Addr() string {
	if s.lis != nil {
		return s.lis.Addr().String()
	}
	return security.SocketAddr(s.cfg.Socket)
}

// AdvertiseAddr is the address workers and other nodes reach the store at.
func (s *Server) AdvertiseAddr() string { return s.store.Addr() }

// SocketAddr is the dial address of the store's Unix socket, or "" when it
// serves none.
func (s *Server) SocketAddr() string {
	if s.sock == nil {
		return ""
	}
	return security.SocketAddr(s.cfg.Socket)
}

// Security is the server's security configuration: the cluster token calls
// must carry, and its certificate.
func (s *Server) Security() security.Security { return s.cfg.Security }

// Store is the state machine the server serves.
func (s *Server) Store() *rendezvous.Store { return s.store }

// SetLiveness records what gossip says of a node (see rendezvous.Store.SetLiveness).
func (s *Server) SetLiveness(name string, l rendezvous.Liveness) { s.store.SetLiveness(name, l) }

// Close shuts the server down, in order: (0) the launchers of jobs that
// ended get their last events, for at most ShutdownTimeout; (1) the store
// drops nodes, which ends Watch streams; (2) gRPC stops gracefully,
// finishing the calls in flight, for at most ShutdownTimeout; (3) then hard,
// closing every connection, since long waits would otherwise hold it. Err is
// closed once serving has stopped. Calling it again does nothing.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		// The jobs that just ended reach their launchers first.
		s.store.AwaitFollowers(s.cfg.ShutdownTimeout)
		if s.replica != nil {
			if err := s.replica.Close(); err != nil {
				s.log.Warn("store replica not closed cleanly", zap.Error(err))
			}
		}
		s.store.Close()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.cfg.ShutdownTimeout):
			s.grpc.Stop()
			<-done
		}
		if err := s.history.Close(); err != nil {
			s.log.Error("job history not closed", zap.Error(err))
		}
	})
}

// deadPeerListener bounds how long an accepted connection's peer may leave
// TCP unanswered: keepalive probes after a third of after idle, four more
// within the rest, and TCP_USER_TIMEOUT for data sent. The peer's kernel
// answers both even while its process is stopped.
type deadPeerListener struct {
	net.Listener
	after time.Duration
}

func (l deadPeerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	tc, ok := c.(*net.TCPConn)
	if err != nil || !ok {
		return c, err
	}
	if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: l.after / 3, Interval: l.after / 6, Count: 4}); err != nil {
		return c, nil // the connection works, only without the bound
	}
	if raw, err := tc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(l.after.Milliseconds()))
		})
	}
	return c, nil
}

func rpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rendezvous.ErrNotLeader):
		var nl *rendezvous.NotLeaderError
		errors.As(err, &nl)
		return notLeaderStatus(nl.GetLeader())
	case errors.Is(err, rendezvous.ErrUnknownOutcome):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, rendezvous.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, rendezvous.ErrNoSession), errors.Is(err, rendezvous.ErrReporting):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, rendezvous.ErrBadEvents):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, rendezvous.ErrNodeTaken):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

func (s *Server) Register(_ context.Context, req *musterv1.RegisterRequest) (*musterv1.RegisterResponse, error) {
	session, err := s.store.Register(req.GetNode(), req.GetNodeKey(), req.GetJobs(), req.GetTorchStores())
	switch {
	case errors.Is(err, rendezvous.ErrNodeTaken):
		return nil, rpcError(err)
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &musterv1.RegisterResponse{Session: session, StoreId: s.store.ID(), FenceAfterMs: s.store.FenceAfter().Milliseconds(),
		StoreReplicas: s.storeReplicas()}, nil
}

func (s *Server) Watch(req *musterv1.WatchRequest, stream musterv1.Agents_WatchServer) error {
	out, gone, err := s.store.Commands(req.GetSession())
	if err != nil {
		return rpcError(err)
	}
	ctx := stream.Context()
	defer s.store.Disconnected(req.GetSession(), gone, "watch stream ended")
	// The header tells the agent its stream is in place.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		cmds := out.Take()
		for i, cmd := range cmds {
			if err := stream.Send(cmd); err != nil {
				// The node's next stream, if its agent comes back, sends them.
				out.Requeue(cmds[i:])
				return err
			}
		}
		select {
		case <-out.Wake():
		case <-gone:
			if s.replica != nil && !s.store.Leading() {
				return s.notLeader()
			}
			return status.Error(codes.Unavailable, "node removed from the store")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Server) Renew(_ context.Context, req *musterv1.RenewRequest) (*musterv1.RenewResponse, error) {
	return &musterv1.RenewResponse{}, rpcError(s.store.Renew(req.GetSession()))
}

func (s *Server) ReportLoss(_ context.Context, req *musterv1.ReportLossRequest) (*musterv1.ReportLossResponse, error) {
	return &musterv1.ReportLossResponse{}, rpcError(s.store.ReportLoss(req.GetSession(), req.GetLoss()))
}

func (s *Server) ReportHealth(_ context.Context, req *musterv1.ReportHealthRequest) (*musterv1.ReportHealthResponse, error) {
	err := s.store.ReportHealth(req.GetSession(), req.GetJobId(), req.GetRoundId(), req.GetHealth())
	return &musterv1.ReportHealthResponse{}, rpcError(err)
}

func (s *Server) Leave(_ context.Context, req *musterv1.LeaveRequest) (*musterv1.LeaveResponse, error) {
	return &musterv1.LeaveResponse{}, rpcError(s.store.Leave(req.GetSession(), req.GetReason()))
}

func (s *Server) PortsReserved(_ context.Context, req *musterv1.PortsReservedRequest) (*musterv1.PortsReservedResponse, error) {
	err := s.store.PortsReserved(req.GetSession(), req.GetRoundId(), req.GetPorts(), req.GetError())
	return &musterv1.PortsReservedResponse{}, rpcError(err)
}

func (s *Server) Publish(ctx context.Context, req *musterv1.PublishRequest) (*musterv1.PublishResponse, error) {
	acked, err := s.store.Publish(ctx, req.GetSession(), req.GetFirstSeq(), req.GetEvents())
	return &musterv1.PublishResponse{AckedSeq: acked}, rpcError(err)
}

func (s *Server) Submit(ctx context.Context, req *musterv1.SubmitRequest) (*musterv1.SubmitResponse, error) {
	// Another local user's job runs as them; the operator's as the agents' users.
	id, err := s.store.Submit(req.GetSpec(), callerFrom(ctx).user, req.GetSubmission())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &musterv1.SubmitResponse{JobId: id, StoreId: s.store.ID(), StoreReplicas: s.storeReplicas()}, nil
}

func (s *Server) WatchJob(req *musterv1.WatchJobRequest, stream musterv1.Jobs_WatchJobServer) error {
	if id := req.GetStoreId(); id != "" && id != s.store.ID() {
		// A job of an earlier incarnation: wait for its agents' reports.
		if err := s.store.Reported(req.GetJobId()); err != nil {
			return rpcError(err)
		}
	}
	if err := s.mayUseJob(callerFrom(stream.Context()), req.GetJobId()); err != nil {
		return err
	}
	from := req.GetFromVersion()
	if id := req.GetStoreId(); id != "" && id != s.store.ID() {
		// The follower read this job from another store, which is gone:
		// this one has the job's events from its own start.
		if _, err := s.store.JobOwner(req.GetJobId()); err != nil {
			return rpcError(err)
		}
		from = 0
		if err := stream.Send(&musterv1.JobEvent{JobId: req.GetJobId(), Event: &musterv1.JobEvent_Restarted{
			Restarted: &musterv1.StoreRestarted{StoreId: s.store.ID()}}}); err != nil {
			return err
		}
	}
	send := stream.Send
	if req.GetSkipOutput() {
		send = func(ev *musterv1.JobEvent) error {
			if ev.GetOutput() != nil {
				return nil
			}
			return stream.Send(ev)
		}
	}
	return rpcError(s.store.Follow(stream.Context(), req.GetJobId(), from, req.GetAttach(), send))
}

func (s *Server) Cancel(ctx context.Context, req *musterv1.CancelRequest) (*musterv1.CancelResponse, error) {
	if err := s.mayUseJob(callerFrom(ctx), req.GetJobId()); err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled"
	}
	ended, err := s.store.Cancel(req.GetJobId(), req.GetForce(), reason, req.GetExitCode())
	return &musterv1.CancelResponse{Ended: ended}, rpcError(err)
}

// Signal sends a signal to every worker of a running job: its owner's or
// the operator's.
func (s *Server) Signal(ctx context.Context, req *musterv1.SignalRequest) (*musterv1.SignalResponse, error) {
	if err := s.mayUseJob(callerFrom(ctx), req.GetJobId()); err != nil {
		return nil, err
	}
	nodes, coalesced, err := s.store.Signal(req.GetJobId(), req.GetSignal(), time.Duration(req.GetCoalesceMs())*time.Millisecond)
	if err != nil {
		return nil, rpcError(err)
	}
	return &musterv1.SignalResponse{Nodes: int32(nodes), Coalesced: coalesced}, nil
}

// SetNodeSchedule cordons, drains or uncordons a node; authorize lets only
// the operator call it.
func (s *Server) SetNodeSchedule(_ context.Context, req *musterv1.SetNodeScheduleRequest) (*musterv1.SetNodeScheduleResponse, error) {
	if _, known := musterv1.NodeSchedule_name[int32(req.GetSchedule())]; !known {
		return nil, status.Errorf(codes.InvalidArgument, "node schedule %d: not one this store knows", req.GetSchedule())
	}
	prev, jobs, err := s.store.SetSchedule(req.GetNode(), req.GetSchedule())
	if err != nil {
		return nil, rpcError(err)
	}
	return &musterv1.SetNodeScheduleResponse{Previous: prev, Jobs: jobs}, nil
}

func (s *Server) ListNodes(context.Context, *musterv1.ListNodesRequest) (*musterv1.ListNodesResponse, error) {
	return &musterv1.ListNodesResponse{Nodes: s.store.Nodes()}, nil
}

func (s *Server) ListJobs(ctx context.Context, _ *musterv1.ListJobsRequest) (*musterv1.ListJobsResponse, error) {
	c := callerFrom(ctx)
	live := s.store.Jobs()
	// The history's newest jobs the store no longer holds, then the store's,
	// each oldest first. Another local user sees their own jobs only.
	return &musterv1.ListJobsResponse{Jobs: append(s.finishedJobs(c, live), visibleJobs(c, live)...)}, nil
}

// finishedJobs are the history's newest jobs that c may read and the store
// no longer holds (live), oldest first, within the list's bounds.
func (s *Server) finishedJobs(c caller, live []*musterv1.JobStatus) []*musterv1.JobStatus {
	held := make(map[string]bool, len(live))
	for _, j := range live {
		held[j.GetJobId()] = true
	}
	var jobs []*musterv1.JobStatus
	history, size := s.history.List(), 0
	for i := len(history) - 1; i >= 0 && len(jobs) < maxListedHistory; i-- {
		j := history[i]
		if held[j.GetJobId()] || !mayRead(c, j) {
			continue
		}
		j = listed(j)
		if size += proto.Size(j); size > maxListedHistoryBytes {
			break
		}
		jobs = append(jobs, j)
	}
	slices.Reverse(jobs)
	return jobs
}

// visibleJobs are the jobs c may list, as a list shows them: all of them
// for the operator, another local user's own only.
func visibleJobs(c caller, jobs []*musterv1.JobStatus) []*musterv1.JobStatus {
	mine := jobs[:0]
	for _, j := range jobs {
		if mayRead(c, j) {
			mine = append(mine, listed(j))
		}
	}
	return mine
}

// WatchJobs sends the jobs the caller may list, then each one again when it
// changes. Changes are read from the store's job table, not queued: a slow
// watcher skips steps and gets each job's latest status, and holds nothing
// of the store's.
func (s *Server) WatchJobs(_ *musterv1.WatchJobsRequest, stream musterv1.Jobs_WatchJobsServer) error {
	ctx := stream.Context()
	c := callerFrom(ctx)
	// The finished jobs first, as a list shows them; they change no more.
	for _, j := range s.finishedJobs(c, s.store.Jobs()) {
		if err := stream.Send(j); err != nil {
			return err
		}
	}
	sent := map[string]*musterv1.JobStatus{}
	for {
		changed := s.store.JobsChanged()
		// Only the jobs the store still holds are remembered.
		now := map[string]*musterv1.JobStatus{}
		for _, j := range visibleJobs(c, s.store.Jobs()) {
			now[j.GetJobId()] = j
			if proto.Equal(sent[j.GetJobId()], j) {
				continue
			}
			if err := stream.Send(j); err != nil {
				return err
			}
		}
		sent = now
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// Bounds on the finished jobs ListJobs takes from the history: the newest,
// within a share of a message. GetJob reaches every job the history keeps.
const (
	maxListedHistory      = 1000
	maxListedHistoryBytes = 4 << 20
)

// listed is j as a list shows it: GetJob has its rounds and the failed
// rank's stderr.
func listed(j *musterv1.JobStatus) *musterv1.JobStatus {
	if len(j.GetFailure().GetStderrTail()) == 0 && len(j.GetRoundNodes()) == 0 {
		return j
	}
	j = proto.CloneOf(j)
	j.RoundNodes = nil
	if j.Failure != nil {
		j.Failure.StderrTail = nil
	}
	return j
}

// GetJob is one job, from the store or its history, for its owner or the
// operator.
func (s *Server) GetJob(ctx context.Context, req *musterv1.GetJobRequest) (*musterv1.JobStatus, error) {
	j := s.store.Job(req.GetJobId())
	if j == nil {
		j = s.history.Get(req.GetJobId())
	}
	if j == nil {
		return nil, status.Errorf(codes.NotFound, "job %q: not found (neither running nor in the store's history)", req.GetJobId())
	}
	if !mayRead(callerFrom(ctx), j) {
		return nil, status.Errorf(codes.PermissionDenied, "job %s belongs to another user", req.GetJobId())
	}
	return j, nil
}

// mayRead lets the operator read every job and a local user their own.
func mayRead(c caller, j *musterv1.JobStatus) bool {
	return c.operator || (c.user != nil && j.GetOwner() != nil && j.GetOwner().GetUid() == c.user.GetUid())
}
