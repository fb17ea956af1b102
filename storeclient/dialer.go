package storeclient

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// AgentUnackedAfter is how long what an agent sent the store may go
// unacknowledged by the store's kernel before the agent drops the
// connection and dials again. A busy or stopped store process still has
// its kernel acknowledge, so only a cut network trips it; without it, a
// connection that lived through a cut of some seconds waits out TCP's
// retransmission backoff, as long again, and the agent's lease renewals
// with it.
const AgentUnackedAfter = 5 * time.Second

// unackedDialer dials TCP with TCP_USER_TIMEOUT set to after.
func unackedDialer(after time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(after.Milliseconds()))
		}); err != nil {
			return err
		}
		return errors.Join(serr)
	}}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}
}
