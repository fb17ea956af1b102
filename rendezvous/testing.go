package rendezvous

import (
	"context"
	"testing"

	"go.uber.org/zap/zaptest"
)

// NewTestStore starts a store on a free loopback port for a test and closes
// it when the test ends. edit may change the configuration first.
func NewTestStore(t testing.TB, edit func(*Config)) *Server {
	t.Helper()
	cfg := Config{Logger: zaptest.NewLogger(t), ListenAddr: "127.0.0.1:0"}
	if edit != nil {
		edit(&cfg)
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	<-s.ReadyNotify()
	return s
}

// NewTestClient dials s for a test.
func NewTestClient(t testing.TB, s *Server, sec Security) *Client {
	t.Helper()
	c, err := Dial(s.Addr(), sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
