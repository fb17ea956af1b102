package tcpstore

import (
	"net"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/kv"
)

// startServer serves a fresh space on 127.0.0.1 until the test ends.
func startServer(t testing.TB) (*kv.Memory, string) {
	t.Helper()
	log := zap.NewNop()
	if _, fuzz := t.(*testing.F); !fuzz {
		log = zaptest.NewLogger(t)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := kv.NewMemoryWith(Limits)
	s := NewServer(l, log)
	s.Use(m.Space("round-1"))
	s.Start()
	<-s.ReadyNotify()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return m, l.Addr().String()
}
