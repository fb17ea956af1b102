package pmi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/kv"
)

// The test client speaks the wire as MPICH's clients and Hydra do, with its own
// plain parsing, so that the server is checked against the protocol rather
// than against itself.
type client struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatalf("send %q: %v", s, err)
	}
}

// line reads one reply line without its newline.
func (c *client) line() string {
	c.t.Helper()
	s, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read reply: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

// call sends one v1 command line and returns the reply line.
func (c *client) call(cmd string) string {
	c.t.Helper()
	c.send(cmd + "\n")
	return c.line()
}

// send2 sends one PMI-2 frame.
func (c *client) send2(body string) {
	c.t.Helper()
	c.send(fmt.Sprintf("%6d%s", len(body), body))
}

// call2 sends one PMI-2 frame and returns the reply body.
func (c *client) call2(body string) string {
	c.t.Helper()
	c.send2(body)
	var hdr [6]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		c.t.Fatalf("read frame header after %q: %v", body, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(hdr[:])))
	if err != nil {
		c.t.Fatalf("frame header %q", hdr)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	return string(b)
}

// expectClosed checks the server closed the connection.
func (c *client) expectClosed() {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if s, err := c.r.ReadString('\n'); err == nil {
		c.t.Fatalf("connection still open, got %q", s)
	}
}

// memBackend is a Backend on one kv.Memory space that counts barriers by
// sequence number.
type memBackend struct {
	SpaceBackend
	mu       sync.Mutex
	barriers map[int]int
}

func newMemBackend(space kv.Space, node string, nodes int) *memBackend {
	return &memBackend{SpaceBackend: SpaceBackend{Space: space, Node: node, Nodes: nodes}, barriers: map[int]int{}}
}

func (b *memBackend) Barrier(ctx context.Context, seq int) error {
	b.mu.Lock()
	b.barriers[seq]++
	b.mu.Unlock()
	return b.SpaceBackend.Barrier(ctx, seq)
}

func (b *memBackend) counts() map[int]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[int]int{}
	for k, v := range b.barriers {
		m[k] = v
	}
	return m
}

// testJob is a one-node job of size ranks, all local.
func testJob(t testing.TB, size int) *Job {
	return &Job{
		KVSName: "muster-test",
		Size:    size,
		AppNum:  3,
		Mapping: ProcessMapping(1, size),
		Local:   size,
		Backend: newMemBackend(kv.NewMemory().Space("job"), "node0", 1),
		Logger:  zaptest.NewLogger(t),
	}
}

// serve starts Serve for rank on one end of a pipe and returns a client on
// the other end and the Result to come.
func serve(t testing.TB, ctx context.Context, j *Job, rank int) (*client, <-chan Result) {
	srv, cli := net.Pipe()
	done := make(chan Result, 1)
	go func() { done <- j.Serve(ctx, srv, rank) }()
	t.Cleanup(func() { cli.Close() })
	return &client{t: t, conn: cli, r: bufio.NewReader(cli)}, done
}

func wait(t testing.TB, done <-chan Result) Result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
		return Result{}
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
