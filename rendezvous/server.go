package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on gRPC traffic. A peer that does not answer a keepalive ping
// within keepaliveTimeout is gone.
const (
	keepaliveTime    = 5 * time.Second
	keepaliveTimeout = 5 * time.Second
	maxMessageBytes  = 16 << 20
	maxStreams       = 4096
	maxWaitTimeout   = time.Hour
)

// Config configures a Server.
type Config struct {
	Logger *zap.Logger
	// ListenAddr is host:port; port 0 picks a free one.
	ListenAddr string
	// Listener, when set, is used instead of ListenAddr.
	Listener net.Listener
	// AdvertiseAddr is the address workers use for the store; it defaults to
	// the listener's address.
	AdvertiseAddr string
	Security      Security
	// ShutdownTimeout bounds the graceful part of Close.
	ShutdownTimeout time.Duration
	// InProcess says the store serves its own process (the embedded
	// default): no keepalive pings, which a suspended process cannot answer.
	InProcess bool
}

// Server serves a Store over gRPC.
type Server struct {
	musterv1.UnimplementedRendezvousServer
	cfg   Config
	log   *zap.Logger
	store *Store
	lis   net.Listener
	grpc  *grpc.Server

	ready     chan struct{}
	errc      chan error
	closeOnce sync.Once
}

// Start listens and serves in the background. The store is usable when
// ReadyNotify is closed.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	lis := cfg.Listener
	if lis == nil {
		if err := CheckListen(cfg.ListenAddr, cfg.Security); err != nil {
			return nil, err
		}
		var err error
		if lis, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.ListenAddr); err != nil {
			return nil, fmt.Errorf("store: listen on %s: %w", cfg.ListenAddr, err)
		}
	}
	addr := cfg.AdvertiseAddr
	if addr == "" {
		addr = lis.Addr().String()
	}
	opts, err := cfg.Security.serverOptions()
	if err != nil {
		lis.Close()
		return nil, err
	}
	opts = append(opts,
		grpc.MaxRecvMsgSize(maxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime, PermitWithoutStream: true}),
	)
	if !cfg.InProcess {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * keepaliveTime, Timeout: keepaliveTimeout}))
	}
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		store: NewStore(StoreConfig{Logger: cfg.Logger, Addr: addr}),
		lis:   lis,
		grpc:  grpc.NewServer(opts...),
		ready: make(chan struct{}),
		errc:  make(chan error, 1),
	}
	musterv1.RegisterRendezvousServer(s.grpc, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, hs)
	go func() {
		close(s.ready)
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.errc <- err
		}
		close(s.errc)
	}()
	s.log.Info("store listening", zap.String("addr", lis.Addr().String()))
	return s, nil
}

// ReadyNotify is closed once the server accepts calls.
func (s *Server) ReadyNotify() <-chan struct{} { return s.ready }

// Err delivers a serving error, and is closed when serving stops.
func (s *Server) Err() <-chan error { return s.errc }

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close shuts the server down, in order: (1) the store fails unfinished jobs
// and drops nodes, which ends Watch streams; (2) gRPC stops gracefully within
// ShutdownTimeout, then (3) hard, since long waits would otherwise hold it.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.store.Close()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.cfg.ShutdownTimeout):
			s.grpc.Stop()
			<-done
		}
	})
}

func rpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

func (s *Server) Register(_ context.Context, req *musterv1.RegisterRequest) (*musterv1.RegisterResponse, error) {
	session, err := s.store.Register(req.GetNode())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &musterv1.RegisterResponse{Session: session}, nil
}

func (s *Server) Watch(req *musterv1.WatchRequest, stream musterv1.Rendezvous_WatchServer) error {
	cmds, gone, err := s.store.Commands(req.GetSession())
	if err != nil {
		return rpcError(err)
	}
	ctx := stream.Context()
	defer s.store.RemoveNode(req.GetSession(), "watch stream ended")
	for {
		select {
		case cmd := <-cmds:
			if err := stream.Send(cmd); err != nil {
				return err
			}
		case <-gone:
			return status.Error(codes.Unavailable, "node removed from the store")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Server) PortsReserved(_ context.Context, req *musterv1.PortsReservedRequest) (*musterv1.PortsReservedResponse, error) {
	err := s.store.PortsReserved(req.GetSession(), req.GetRoundId(), req.GetPorts(), req.GetError())
	return &musterv1.PortsReservedResponse{}, rpcError(err)
}

func (s *Server) Publish(ctx context.Context, req *musterv1.PublishRequest) (*musterv1.PublishResponse, error) {
	return &musterv1.PublishResponse{}, rpcError(s.store.Publish(ctx, req.GetSession(), req.GetEvents()))
}

func (s *Server) Submit(_ context.Context, req *musterv1.SubmitRequest) (*musterv1.SubmitResponse, error) {
	id, err := s.store.Submit(req.GetSpec())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &musterv1.SubmitResponse{JobId: id}, nil
}

func (s *Server) WatchJob(req *musterv1.WatchJobRequest, stream musterv1.Rendezvous_WatchJobServer) error {
	return rpcError(s.store.Follow(stream.Context(), req.GetJobId(), req.GetFromVersion(), req.GetAttach(), stream.Send))
}

func (s *Server) Cancel(_ context.Context, req *musterv1.CancelRequest) (*musterv1.CancelResponse, error) {
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled"
	}
	return &musterv1.CancelResponse{}, rpcError(s.store.Cancel(req.GetJobId(), req.GetForce(), reason, req.GetExitCode()))
}

func (s *Server) ListNodes(context.Context, *musterv1.ListNodesRequest) (*musterv1.ListNodesResponse, error) {
	return &musterv1.ListNodesResponse{Nodes: s.store.Nodes()}, nil
}

func (s *Server) ListJobs(context.Context, *musterv1.ListJobsRequest) (*musterv1.ListJobsResponse, error) {
	return &musterv1.ListJobsResponse{Jobs: s.store.Jobs()}, nil
}

func (s *Server) KVSet(_ context.Context, req *musterv1.KVSetRequest) (*musterv1.KVSetResponse, error) {
	v, err := s.store.KV().Set(req.GetScope(), req.GetKey(), req.GetValue())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &musterv1.KVSetResponse{Version: v}, nil
}

func waitContext(ctx context.Context, ms int64) (context.Context, context.CancelFunc) {
	d := time.Duration(ms) * time.Millisecond
	if d <= 0 || d > maxWaitTimeout {
		d = maxWaitTimeout
	}
	return context.WithTimeout(ctx, d)
}

func (s *Server) KVGet(ctx context.Context, req *musterv1.KVGetRequest) (*musterv1.KVGetResponse, error) {
	ctx, cancel := waitContext(ctx, req.GetTimeoutMs())
	defer cancel()
	v, ver, err := s.store.KV().Get(ctx, req.GetScope(), req.GetKey(), req.GetWait())
	if err != nil {
		return nil, rpcError(err)
	}
	return &musterv1.KVGetResponse{Value: v, Version: ver}, nil
}

func (s *Server) Barrier(ctx context.Context, req *musterv1.BarrierRequest) (*musterv1.BarrierResponse, error) {
	ctx, cancel := waitContext(ctx, req.GetTimeoutMs())
	defer cancel()
	err := s.store.KV().Barrier(ctx, req.GetScope(), req.GetName(), req.GetParticipant(), int(req.GetCount()))
	return &musterv1.BarrierResponse{}, rpcError(err)
}
