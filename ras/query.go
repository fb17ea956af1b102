package ras

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// clientProtocol is the RAS client protocol this package speaks; NCCL 2.24
// to 2.30 all answer "SERVER PROTOCOL 2" whatever the client sends.
const clientProtocol = 2

// extraWait is how long past the TIMEOUT the exchange may take: NCCL gives
// up on a collective after TIMEOUT plus RAS_COLLECTIVE_EXTRA_TIMEOUT (5s),
// and connecting and writing out the report take a little more.
const extraWait = 10 * time.Second

// maxAnswerLine bounds one answer line of the handshake.
const maxAnswerLine = 1024

var errTooLarge = fmt.Errorf("report larger than %d bytes", MaxReportSize)

// Query asks the NCCL RAS service at addr (DefaultAddr when "") for the
// state of the job. timeout is how long RAS waits for the other processes'
// data (sent as TIMEOUT, rounded up to whole seconds, at least 1); the whole
// exchange ends by then plus 10 seconds, or earlier with ctx.
//
// It asks for JSON where the server accepts "SET FORMAT json" (NCCL 2.28.7
// and later), since JSON has every rank's counts where the text names only
// outliers, and for the text report otherwise. A JSON report over
// MaxReportSize (some 1700 ranks over all communicators, at about 600 bytes
// a rank) is asked again as text, which names only the outliers.
func Query(ctx context.Context, addr string, timeout time.Duration) (*Report, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	r, err := query(ctx, addr, timeout, true)
	if errors.Is(err, errTooLarge) && r != nil && r.Format == "json" {
		r, err = query(ctx, addr, timeout, false)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// exchange is one connection to the RAS service.
type exchange struct {
	ctx  context.Context
	addr string
	conn net.Conn
	in   *bufio.Reader
}

// query runs one exchange. On errTooLarge it returns the report begun, so
// that Query knows which format overflowed.
func query(ctx context.Context, addr string, timeout time.Duration, wantJSON bool) (*Report, error) {
	secs := timeoutSeconds(timeout)
	deadline := time.Now().Add(time.Duration(secs)*time.Second + extraWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	x := &exchange{ctx: ctx, addr: addr}
	dialCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dialCtx, "tcp", addr)
	if err != nil {
		return nil, x.fail("connecting", err)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	// Cancelling ctx wakes any read or write under way.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	x.conn, x.in = conn, bufio.NewReaderSize(conn, maxAnswerLine)

	r := &Report{Format: "text"}
	answer, err := x.ask(fmt.Sprintf("CLIENT PROTOCOL %d", clientProtocol))
	if err != nil {
		return nil, err
	}
	// A different version is no reason to stop: NCCL's own client goes on.
	rest, ok := cutPrefixFold(answer, "SERVER PROTOCOL ")
	n, okN := number(strings.TrimSpace(rest), maxInt32)
	if !ok || !okN {
		return nil, x.fail("CLIENT PROTOCOL", fmt.Errorf("unexpected answer %q", answer))
	}
	r.ServerProtocol = int(n)

	if answer, err = x.ask(fmt.Sprintf("TIMEOUT %d", secs)); err != nil {
		return nil, err
	}
	if !strings.EqualFold(answer, "OK") {
		return nil, x.fail("TIMEOUT", fmt.Errorf("unexpected answer %q", answer))
	}

	if wantJSON {
		if answer, err = x.ask("SET FORMAT json"); err != nil {
			return nil, err
		}
		switch {
		case strings.EqualFold(answer, "OK"):
			r.Format = "json"
		case hasPrefixFold(answer, "ERROR"):
			// NCCL before 2.28.7: "ERROR: Unknown command SET FORMAT json".
		default:
			return nil, x.fail("SET FORMAT json", fmt.Errorf("unexpected answer %q", answer))
		}
	}

	if _, err := io.WriteString(conn, "VERBOSE STATUS\n"); err != nil {
		return nil, x.fail("VERBOSE STATUS", err)
	}
	raw, err := io.ReadAll(io.LimitReader(x.in, MaxReportSize+1))
	if err != nil {
		return nil, x.fail("reading the report", err)
	}
	if len(raw) > MaxReportSize {
		return r, x.fail("reading the report", errTooLarge)
	}
	if len(raw) == 0 {
		return nil, x.fail("reading the report", errors.New("server closed the connection without a report"))
	}

	var parsed *Report
	if r.Format == "json" {
		parsed, err = ParseJSON(raw)
	} else {
		parsed, err = ParseText(raw)
		if err == nil && !parsed.Complete {
			err = errors.New("the report ends before its Warnings section: the server closed early")
		}
	}
	if err != nil {
		return nil, x.fail("parsing the "+r.Format+" report", err)
	}
	parsed.ServerProtocol = r.ServerProtocol
	parsed.Raw = raw
	return parsed, nil
}

// ask sends one command line and reads its one-line answer, without the
// line end.
func (x *exchange) ask(cmd string) (string, error) {
	if _, err := io.WriteString(x.conn, cmd+"\n"); err != nil {
		return "", x.fail(cmd, err)
	}
	line, err := x.in.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", x.fail(cmd, fmt.Errorf("answer longer than %d bytes", maxAnswerLine))
	case errors.Is(err, io.EOF):
		return "", x.fail(cmd, errors.New("server closed the connection"))
	case err != nil:
		return "", x.fail(cmd, err)
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}

// fail says what went wrong in which step. When the caller's context ended,
// that is the cause, not the I/O error it provoked.
func (x *exchange) fail(step string, err error) error {
	switch {
	case x.ctx.Err() != nil:
		err = x.ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Our own deadline, or ctx's a moment before ctx notices.
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return fmt.Errorf("NCCL RAS at %s: %s: %w", x.addr, step, err)
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if !hasPrefixFold(s, prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// timeoutSeconds is the TIMEOUT sent for a timeout: whole seconds, rounded
// up, at least 1 (0 would make NCCL wait forever) and at most a day.
func timeoutSeconds(timeout time.Duration) int64 {
	const day = 24 * time.Hour
	if timeout > day {
		return int64(day / time.Second)
	}
	return max(int64((timeout+time.Second-1)/time.Second), 1)
}
