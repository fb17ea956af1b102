package tcpstore

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/kv"
	"github.com/musterhq/muster/testwait"
)

// startServer serves a fresh space, "round-1" of the server's Memory, on
// 127.0.0.1 until the test ends.
func startServer(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := zap.NewNop()
	if _, fuzz := t.(*testing.F); !fuzz {
		log = zaptest.NewLogger(t)
	}
	s := NewServer(l, nil, log)
	s.Use(testMemory(s).Space("round-1"))
	s.Start()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

var memories sync.Map // *Server → *kv.Memory, for tests that drop rounds

func testMemory(s *Server) *kv.Memory {
	m, _ := memories.LoadOrStore(s, kv.NewMemoryWith(Limits))
	return m.(*kv.Memory)
}

func dial(t *testing.T, s *Server) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connections waits until the server holds n connections.
func connections(t *testing.T, s *Server, n int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("the server to hold %d connections", n), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == n
	})
}

// TestManyWaiters has thousands of clients wait for one key, as ranks wait
// for the last to join; one SET releases them all.
func TestManyWaiters(t *testing.T) {
	s := startServer(t)
	const n = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var clients []*Client
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(ctx, s.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			if joined, err := c.Add("joined", 1); err != nil {
				errs <- err
			} else if joined == n {
				errs <- c.Set("last", []byte("1"))
			}
			errs <- c.Wait(ctx, "last")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	connections(t, s, n)
	for _, c := range clients {
		c.Close()
	}
	connections(t, s, 0)
}

// TestDroppedMidRequest: a client that goes in the middle of a request, or
// while it waits, costs the server that connection and nothing else.
func TestDroppedMidRequest(t *testing.T) {
	s := startServer(t)
	other := dial(t, s)
	if err := other.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// What the server has taken in before the drop matters only where it
	// acts on it: there the test waits for that. The rest reaches it
	// before the connection's end, in order.
	tests := []struct {
		name  string
		sent  query
		taken func(t *testing.T, nc net.Conn)
	}{
		{"inside VALIDATE", query{}.op(opValidate).u32(validateMagic)[:3], nil},
		{"inside a key's length", validated().op(opSet).u64(5)[:8], nil},
		{"inside a key", validated().op(opSet).u64(5).append("ab"), nil},
		{"before a value", validated().op(opSet).str("k2"), nil},
		{"inside a value", validated().op(opSet).str("k2").u64(1 << 20).append("xyz"), nil},
		{"inside MULTI_SET", validated().op(opMultiSet).u64(3).str("m1").str("1").str("m2"), nil},
		{"inside WAIT's keys", validated().op(opWait).u64(2).str("a"), nil},
		{"while waiting", validated().op(opWait).keys([]string{"never"}), func(t *testing.T, _ net.Conn) {
			testwait.Until(t, 10*time.Second, "the server to put the WAIT aside", func() bool { return s.waits.Load() == 1 })
		}},
		{"after CANCEL_WAIT", validated().op(opWait).keys([]string{"never"}).op(opCancelWait), func(t *testing.T, nc net.Conn) {
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if b, err := io.ReadAll(io.LimitReader(nc, 1)); err != nil || len(b) != 1 || b[0] != waitCanceled {
				t.Fatalf("answer to CANCEL_WAIT: %v, %v", b, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			connections(t, s, 2)
			if _, err := nc.Write(tt.sent); err != nil {
				t.Fatal(err)
			}
			if tt.taken != nil {
				tt.taken(t, nc)
			}
			nc.Close()
			connections(t, s, 1)
			testwait.Until(t, 10*time.Second, "the dropped WAIT to end", func() bool { return s.waits.Load() == 0 })
			if v, err := other.Get("k"); err != nil || string(v) != "v" {
				t.Fatalf("the other client after the drop: %q, %v", v, err)
			}
			if ok, err := other.Check("k2", "m1"); err != nil || ok {
				t.Fatalf("a dropped request's keys were set: %v, %v", ok, err)
			}
		})
	}
}

// TestBadInputClosesThatConnection: input that is not the protocol, or
// over its bounds, closes that one connection.
func TestBadInputClosesThatConnection(t *testing.T) {
	s := startServer(t)
	other := dial(t, s)
	tests := []struct {
		name string
		sent query
	}{
		{"no VALIDATE", query{}.op(opPing).u32(1)},
		{"wrong magic", query{}.op(opValidate).u32(0x12345678)},
		{"unknown opcode", validated().op(17)},
		{"key over 8 KiB", validated().op(opGet).u64(MaxKeyBytes + 1)},
		{"value over 8 MiB", validated().op(opSet).str("k").u64(MaxValueBytes + 1)},
		{"too many keys", validated().op(opCheck).u64(MaxRequestKeys + 1)},
		{"ADD to a value not a number", validated().op(opSet).str("text").str("abc").op(opAdd).str("text").u64(1)},
		{"a second WAIT while one waits", validated().op(opWait).keys([]string{"x"}).op(opWait).keys([]string{"y"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc.Write(tt.sent); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, nc); err != nil {
				t.Fatalf("the connection was not closed: %v", err)
			}
			if err := other.Ping(7); err != nil {
				t.Fatalf("another client: %v", err)
			}
		})
	}
}

// TestNewRound: connections stay with the round they came in; a dropped
// round's waiters are let go, and the next round starts empty.
func TestNewRound(t *testing.T) {
	s := startServer(t)
	old := dial(t, s)
	if err := old.Set("from-round-1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- old.Wait(context.Background(), "never") }()
	connections(t, s, 1)
	m := testMemory(s)
	s.Use(m.Space("round-2"))
	m.Drop("round-1")
	select {
	case err := <-waited:
		if err == nil {
			t.Fatal("a wait of a dropped round returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a wait of a dropped round still waits")
	}
	next := dial(t, s)
	if ok, err := next.Check("from-round-1"); err != nil || ok {
		t.Fatalf("round 2 sees round 1's key: %v, %v", ok, err)
	}
}

// refused checks that s closes a new connection at once.
func refused(t *testing.T, s *Server) {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection past the limit: read %d, %v", n, err)
	}
}

// TestConnectionLimit: past the limit that servers share, new connections
// are closed at once, on every server; a closed one frees its place.
func TestConnectionLimit(t *testing.T) {
	a, b := startServer(t), startServer(t)
	limit := NewConnLimit(3)
	for _, s := range []*Server{a, b} {
		s.mu.Lock()
		s.limit = limit
		s.mu.Unlock()
	}
	dial(t, a)
	dial(t, b)
	last := dial(t, a)
	refused(t, a)
	refused(t, b)
	last.Close()
	connections(t, a, 1)
	dial(t, b)
}

// TestOneServerLeavesTheOthersTheirShare: one job's clients cannot take
// every connection the servers share.
func TestOneServerLeavesTheOthersTheirShare(t *testing.T) {
	a, b := startServer(t), startServer(t)
	limit := NewConnLimit(8) // a server may hold 6
	for _, s := range []*Server{a, b} {
		s.mu.Lock()
		s.limit = limit
		s.mu.Unlock()
	}
	for range 6 {
		dial(t, a)
	}
	refused(t, a)
	dial(t, b)
	dial(t, b)
	refused(t, b)
}

// TestSilentConnection: a connection that never validates is closed once
// validateWait has passed.
func TestSilentConnection(t *testing.T) {
	s := startServer(t)
	s.mu.Lock()
	s.validateWait = 200 * time.Millisecond
	s.mu.Unlock()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if n, err := nc.Read(make([]byte, 1)); err != io.EOF || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("silent connection: read %d, %v after %s", n, err, time.Since(start))
	}
}

// TestCloseEndsWaits: Close lets every waiting client go, promptly.
func TestCloseEndsWaits(t *testing.T) {
	s := startServer(t)
	var wg sync.WaitGroup
	for range 50 {
		c := dial(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Wait(context.Background(), "never")
		}()
	}
	connections(t, s, 50)
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if d := time.Since(start); d > closeWait {
		t.Fatalf("Close took %s", d)
	}
}
