package tcpstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"time"
)

// Client speaks PyTorch's TCPStore protocol over one TCP connection, as a
// torch rank does. It is not safe for concurrent use. After an I/O error the
// stream is out of step, so every later call returns that error.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	buf  query
	err  error
}

// Dial connects to addr, validates and pings, retrying with backoff until
// ctx ends, as torch's ranks do: the server may come up after them, and a
// busy one may refuse or reset connections.
func Dial(ctx context.Context, addr string) (*Client, error) {
	delay := 10 * time.Millisecond
	for {
		c, err := dialOnce(ctx, addr)
		if err == nil {
			return c, nil
		}
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("tcpstore: dial %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

func dialOnce(ctx context.Context, addr string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, r: bufio.NewReader(conn)}
	stop := c.interruptOn(ctx)
	err = c.send(c.begin(opValidate).u32(validateMagic))
	if err == nil {
		err = c.Ping(rand.Uint32())
	}
	stop()
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// interruptOn makes a blocked read or write fail once ctx ends; the
// returned func undoes that and must run before the next query.
func (c *Client) interruptOn(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		c.conn.SetDeadline(time.Now())
		close(done)
	})
	return func() {
		if !cancel() {
			<-done
			c.conn.SetDeadline(time.Time{})
		}
	}
}

func (c *Client) begin(q byte) query { return c.buf[:0].op(q) }

// send writes a whole query with one write.
func (c *Client) send(b query) error {
	if c.err != nil {
		return c.err
	}
	_, err := c.conn.Write(b)
	if cap(b) <= 64<<10 {
		c.buf = b[:0] // reuse small buffers; let a large one go
	}
	return c.fail(err)
}

// fail records the first I/O error, after which replies cannot be matched.
func (c *Client) fail(err error) error {
	if err != nil && c.err == nil {
		c.err = fmt.Errorf("tcpstore: %w", err)
	}
	if err != nil {
		return c.err
	}
	return nil
}

func (c *Client) readBytes() ([]byte, error) {
	b, err := readBytes(c.r)
	return b, c.fail(err)
}

func (c *Client) readI64() (int64, error) {
	n, err := readI64(c.r)
	return n, c.fail(err)
}

func (c *Client) readU8() (byte, error) {
	b, err := readU8(c.r)
	return b, c.fail(err)
}

// Ping sends nonce and checks that it comes back.
func (c *Client) Ping(nonce uint32) error {
	if err := c.send(c.begin(opPing).u32(nonce)); err != nil {
		return err
	}
	got, err := readU32(c.r)
	if err != nil {
		return c.fail(err)
	}
	if got != nonce {
		return c.fail(fmt.Errorf("PING %#x answered %#x", nonce, got))
	}
	return nil
}

func (c *Client) Set(key string, value []byte) error {
	return c.send(c.begin(opSet).str(key).bytes(value))
}

// CompareSet stores desired if key holds expected (or is missing and
// expected is empty) and returns what the server reports key holds.
func (c *Client) CompareSet(key string, expected, desired []byte) ([]byte, error) {
	if err := c.send(c.begin(opCompareSet).str(key).bytes(expected).bytes(desired)); err != nil {
		return nil, err
	}
	return c.readBytes()
}

// Get is the raw GET: it does not wait, and torch's server answers a
// missing key with an empty value.
func (c *Client) Get(key string) ([]byte, error) {
	if err := c.send(c.begin(opGet).str(key)); err != nil {
		return nil, err
	}
	return c.readBytes()
}

func (c *Client) Add(key string, delta int64) (int64, error) {
	if err := c.send(c.begin(opAdd).str(key).i64(delta)); err != nil {
		return 0, err
	}
	return c.readI64()
}

// Check reports whether every key exists.
func (c *Client) Check(keys ...string) (bool, error) {
	if err := c.send(c.begin(opCheck).keys(keys)); err != nil {
		return false, err
	}
	b, err := c.readU8()
	switch {
	case err != nil:
		return false, err
	case b == checkReady:
		return true, nil
	case b == checkNotReady:
		return false, nil
	}
	return false, c.fail(fmt.Errorf("CHECK answered %d", b))
}

// Wait blocks until every key exists. If ctx ends first it cancels the
// wait, which leaves the connection usable, and returns ctx's error.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	if err := c.send(c.begin(opWait).keys(keys)); err != nil {
		return err
	}
	stop := c.interruptOn(ctx)
	b, err := readU8(c.r)
	stop()
	if err == nil {
		if b != stopWaiting {
			return c.fail(fmt.Errorf("WAIT answered %d", b))
		}
		return nil
	}
	if ctx.Err() == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return c.fail(err)
	}
	if err := c.send(c.begin(opCancelWait)); err != nil {
		return err
	}
	// The keys may have arrived just as we gave up: then STOP_WAITING
	// comes before WAIT_CANCELED, as torch's client expects too.
	b, err = c.readU8()
	if err == nil && b == stopWaiting {
		b, err = c.readU8()
	}
	if err != nil {
		return err
	}
	if b != waitCanceled {
		return c.fail(fmt.Errorf("CANCEL_WAIT answered %d", b))
	}
	return fmt.Errorf("tcpstore: wait for %q: %w", keys, ctx.Err())
}

func (c *Client) NumKeys() (int64, error) {
	if err := c.send(c.begin(opNumKeys)); err != nil {
		return 0, err
	}
	return c.readI64()
}

// Delete removes key and reports whether it was there.
func (c *Client) Delete(key string) (bool, error) {
	if err := c.send(c.begin(opDeleteKey).str(key)); err != nil {
		return false, err
	}
	n, err := c.readI64()
	return n > 0, err
}

func (c *Client) Append(key string, value []byte) error {
	return c.send(c.begin(opAppend).str(key).bytes(value))
}

// MultiGet is the raw MULTI_GET: like Get it does not wait for the keys.
func (c *Client) MultiGet(keys ...string) ([][]byte, error) {
	if len(keys) > maxReplyValues {
		return nil, fmt.Errorf("tcpstore: MULTI_GET of %d keys is over the %d-key bound", len(keys), maxReplyValues)
	}
	if err := c.send(c.begin(opMultiGet).keys(keys)); err != nil {
		return nil, err
	}
	values := make([][]byte, len(keys))
	for i := range values {
		v, err := c.readBytes()
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	return values, nil
}

func (c *Client) MultiSet(keys []string, values [][]byte) error {
	if len(keys) != len(values) {
		return fmt.Errorf("tcpstore: MULTI_SET of %d keys and %d values", len(keys), len(values))
	}
	b := c.begin(opMultiSet).i64(int64(len(keys)))
	for i, k := range keys {
		b = b.str(k).bytes(values[i])
	}
	return c.send(b)
}

func (c *Client) QueuePush(key string, value []byte) error {
	return c.send(c.begin(opQueuePush).str(key).bytes(value))
}

// QueuePop does not wait: length is the queue's length before the pop, and
// value is the popped item when length > 0.
func (c *Client) QueuePop(key string) (length int64, value []byte, err error) {
	if err := c.send(c.begin(opQueuePop).str(key)); err != nil {
		return 0, nil, err
	}
	if length, err = c.readI64(); err != nil || length == 0 {
		return length, nil, err
	}
	if length < 0 {
		return length, nil, c.fail(fmt.Errorf("QUEUE_POP answered length %d", length))
	}
	value, err = c.readBytes()
	return length, value, err
}

func (c *Client) QueueLen(key string) (int64, error) {
	if err := c.send(c.begin(opQueueLen).str(key)); err != nil {
		return 0, err
	}
	return c.readI64()
}

func (c *Client) Close() error { return c.conn.Close() }
