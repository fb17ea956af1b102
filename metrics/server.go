package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Bounds on the metrics server's clients: Prometheus and the probes send
// small requests and read small answers.
const (
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 30 * time.Second
	// idleTimeout frees a kept-alive connection no request came on.
	idleTimeout     = 30 * time.Second
	maxHeaderBytes  = 16 << 10
	shutdownTimeout = 2 * time.Second
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Logger *zap.Logger
	// Addr is the TCP HOST:PORT to listen on; port 0 picks one.
	Addr string
	// Gatherer is what /metrics serves.
	Gatherer prometheus.Gatherer
	// Ready says why the node is not ready, or nil when it is: /readyz
	// and the gRPC health service answer from it.
	Ready func() error
}

// Server serves /metrics (Prometheus' text format), /healthz (200 while
// the process serves), /readyz (200, or 503 with the reason), and, for
// Kubernetes' gRPC probe, the grpc.health.v1 service in plain text (h2c):
// it answers SERVING when the node is ready.
type Server struct {
	log  *zap.Logger
	lis  net.Listener
	http *http.Server
	errc chan error

	closeOnce sync.Once
	closeErr  error // Close's
}

// Start listens on cfg.Addr and serves in the background; a failure to
// serve later comes on Err. A failed Start holds nothing.
func Start(cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", cfg.Addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(cfg.Logger), ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := cfg.Ready(); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	probes := grpc.NewServer(grpc.MaxRecvMsgSize(4<<10), grpc.MaxConcurrentStreams(16))
	healthpb.RegisterHealthServer(probes, readiness{ready: cfg.Ready})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			probes.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: readHeaderTimeout, WriteTimeout: writeTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, ErrorLog: zap.NewStdLog(cfg.Logger), Protocols: new(http.Protocols)}
	// HTTP/1 for Prometheus and curl; HTTP/2 without TLS for gRPC probes.
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	s := &Server{log: cfg.Logger, lis: lis, http: srv, errc: make(chan error, 1)}
	go func() {
		if err := srv.Serve(limitSources(lis)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errc <- err
		}
		close(s.errc)
	}()
	cfg.Logger.Info("serving metrics and probes", zap.String("addr", lis.Addr().String()))
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Err delivers why the server stopped serving before Close, and is closed
// once it has stopped.
func (s *Server) Err() <-chan error { return s.errc }

// Close stops the server, waiting at most shutdownTimeout for requests in
// flight; Err is closed once it has stopped. Calling it again does nothing
// more and returns the first call's error.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			s.closeErr = s.http.Close()
		}
	})
	return s.closeErr
}

// readiness is the grpc.health.v1 service of the node's readiness, for
// every service name asked.
type readiness struct {
	healthpb.UnimplementedHealthServer
	ready func() error
}

func (r readiness) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st := healthpb.HealthCheckResponse_SERVING
	if r.ready() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

func (r readiness) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	return status.Error(codes.Unimplemented, "watch is not served here: use Check")
}
