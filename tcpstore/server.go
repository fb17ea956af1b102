package tcpstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/kv"
)

// closeWait bounds how long Close waits for its connections to end.
const closeWait = 5 * time.Second

// ConnLimit bounds the connections of every Server that shares it, so that
// the servers of one process together stay within its file descriptors; and
// one server's, so that one job's clients cannot take the others' share.
type ConnLimit struct {
	max       int64
	perServer int
	held      atomic.Int64
}

// NewConnLimit allows n connections at once, and a server all of them but a
// quarter, at most 4,096, kept for the others.
func NewConnLimit(n int) *ConnLimit {
	return &ConnLimit{max: int64(n), perServer: n - min(n/4, 4096)}
}

func (cl *ConnLimit) take() bool {
	if cl.held.Add(1) > cl.max {
		cl.held.Add(-1)
		return false
	}
	return true
}

func (cl *ConnLimit) give() { cl.held.Add(-1) }

// Held is how many connections the servers sharing cl hold now.
func (cl *ConnLimit) Held() int { return int(cl.held.Load()) }

// Server serves the TCPStore protocol on a listener. Each connection works
// on the space in use when it was accepted: a new round's space leaves the
// last round's connections on theirs.
type Server struct {
	l     net.Listener
	log   *zap.Logger
	limit *ConnLimit
	// validateWait bounds how long a connection may keep a place before
	// its VALIDATE, which torch sends as soon as it connects.
	validateWait time.Duration
	// admit, when set, decides on each connection before it is served;
	// ctx ends when the server closes.
	admit  func(ctx context.Context, nc net.Conn) error
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	space    kv.Space
	conns    map[*conn]struct{}
	closed   bool
	refused  int       // connections refused for the limit since the last warning
	warned   time.Time // when that was
	failed   int       // connections closed on bad input since the last log line
	logged   time.Time // when that was
	denied   int       // connections not admitted since the last log line
	deniedAt time.Time // when that was

	wg        sync.WaitGroup // the accept loop and every connection
	waits     atomic.Int32   // WAITs waiting aside, for tests
	closeOnce sync.Once
}

// NewServer serves l once started, within limit (nil: MaxConnections of its
// own); until Use, connections are refused.
func NewServer(l net.Listener, limit *ConnLimit, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	if limit == nil {
		limit = NewConnLimit(MaxConnections)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{l: l, log: log, limit: limit, validateWait: 30 * time.Second,
		conns: map[*conn]struct{}{}, ctx: ctx, cancel: cancel}
}

// Admit has admit decide on each connection, before Start: PyTorch's
// clients carry no credential, so who may use a store is told by where a
// connection comes from. A connection it refuses is closed, and logged.
func (s *Server) Admit(admit func(ctx context.Context, nc net.Conn) error) { s.admit = admit }

// Use makes sp the space of connections accepted from now on.
func (s *Server) Use(sp kv.Space) {
	s.mu.Lock()
	s.space = sp
	s.mu.Unlock()
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Listen listens on addr for a Server. Its connections do without TCP
// keep-alive, whose set-up would cost the accepting loop four system calls
// a connection; ranks close their own, and the job's end closes the rest.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}

// Start accepts connections in the background. Clients may connect as soon
// as the listener listens: the kernel queues them until then.
func (s *Server) Start() {
	s.wg.Add(1)
	go s.accept()
}

func (s *Server) accept() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("TCPStore accept failed", zap.Error(err), zap.Duration("retry-in", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		// Thousands of ranks connect at once: the loop only accepts, so the
		// listen queue drains fast; each connection is set up on its own.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if s.admit != nil {
				// A connection waiting to be admitted holds a place too.
				if !s.limit.take() {
					s.notAdmitted(nc.RemoteAddr(), errors.New("too many connections"))
					nc.Close()
					return
				}
				err := s.admit(s.ctx, nc)
				s.limit.give()
				if err != nil {
					s.notAdmitted(nc.RemoteAddr(), err)
					nc.Close()
					return
				}
			}
			if c := s.add(nc); c != nil {
				c.serve()
			} else {
				nc.Close()
			}
		}()
	}
}

// add admits a connection, or says no (nil): closed, full, or no space yet.
func (s *Server) add(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed || s.space == nil:
		return nil
	case len(s.conns) >= s.limit.perServer || !s.limit.take():
		// A flood of connections must not flood the log too.
		if s.refused++; time.Since(s.warned) > 10*time.Second {
			s.log.Warn("TCPStore connections refused: too many", zap.Int("refused", s.refused),
				zap.Int("held", len(s.conns)), zap.Int("limit", s.limit.perServer), zap.Int64("all-stores-limit", s.limit.max),
				zap.Stringer("last-from", nc.RemoteAddr()))
			s.refused, s.warned = 0, time.Now()
		}
		return nil
	}
	c := newConn(s, nc, s.space)
	s.conns[c] = struct{}{}
	return c
}

// closedOnError logs a connection closed for its input or its round, at
// most once in 10 s with the count since: bad clients must not flood the log.
func (s *Server) closedOnError(from net.Addr, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed++; time.Since(s.logged) > 10*time.Second {
		level := zap.InfoLevel
		if errors.Is(err, kv.ErrFull) {
			level = zap.WarnLevel // a bound reached: the log names the job
		}
		s.log.Log(level, "TCPStore connection closed", zap.Stringer("from", from), zap.Error(err), zap.Int("closed-since-last-line", s.failed))
		s.failed, s.logged = 0, time.Now()
	}
}

// notAdmitted logs a connection refused by admit, at most once in 10 s
// with the count since: a flood of them must not flood the log.
func (s *Server) notAdmitted(from net.Addr, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.denied++; time.Since(s.deniedAt) > 10*time.Second {
		s.log.Warn("TCPStore connection refused", zap.Stringer("from", from), zap.Error(err), zap.Int("refused-since-last-line", s.denied))
		s.denied, s.deniedAt = 0, time.Now()
	}
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.limit.give()
}

// Close stops the server, in order: (1) it accepts no more; (2) it closes
// every connection, which ends their waits; (3) it waits for them, at most
// closeWait.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		s.cancel()
		err = s.l.Close()
		for _, c := range conns {
			c.close()
		}
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(closeWait):
			err = errors.Join(err, errors.New("tcpstore: connections did not end"))
		}
	})
	return err
}
