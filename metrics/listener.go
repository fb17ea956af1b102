package metrics

import (
	"net"
	"sync"
)

// Bounds on the metrics port's connections: one source (a host, or a
// process that opens connections and sends nothing) can hold perSource of
// them, all sources together maxConns. A connection past either bound is
// closed at once rather than queued, so that the probes of the node's
// kubelet still get theirs.
const (
	perSource = 16
	maxConns  = 512
)

// sourceLimit is a listener that holds each remote address to perSource
// open connections and all of them to maxConns.
type sourceLimit struct {
	net.Listener
	mu    sync.Mutex
	open  map[string]int // by remote IP
	total int
}

func limitSources(l net.Listener) *sourceLimit {
	return &sourceLimit{Listener: l, open: map[string]int{}}
}

// Accept returns the next connection within the bounds, closing those past
// them.
func (l *sourceLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
		l.mu.Lock()
		full := l.open[ip] >= perSource || l.total >= maxConns
		if !full {
			l.open[ip]++
			l.total++
		}
		l.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		return &sourceConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *sourceLimit) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// sourceConn gives its place back once, when it is closed.
type sourceConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *sourceConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
