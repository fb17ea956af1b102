package metrics

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Idle connections from one source (a host that connects and sends
// nothing) cannot keep the probes of another from their answers, and the
// source's own connections past its share are closed at once.
func TestProbesAnswerWhileOneSourceHoldsConnections(t *testing.T) {
	s, err := Start(ServerConfig{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), Ready: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	from := func(ip string) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	}
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range 4 * perSource {
		c, err := from("127.0.0.3").Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// Before any of them timed out (5 s without a request's header).
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: from("127.0.0.2").DialContext}}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := client.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatalf("%s while one source holds %d connections: %v", path, len(idle), err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	// The last one is past the source's share: closed at once, unread.
	last := idle[len(idle)-1]
	last.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := last.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the source's connection past its share: read %d, %v; want it closed", n, err)
	}
}

// Close twice is Close once: Err is closed after it, and the port is free
// again.
func TestCloseTwiceClosesErr(t *testing.T) {
	s, err := Start(ServerConfig{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), Ready: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close %d: %v", i+1, err)
		}
	}
	select {
	case err, ok := <-s.Err():
		if ok {
			t.Fatalf("Err delivered %v after Close, want it closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Err not closed after Close")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still held after Close: %v", err)
	}
	l.Close()
}
