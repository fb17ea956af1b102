package tcpstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/musterhq/muster/kv"
)

// conn is one client's connection. Commands are served in order; a WAIT
// that cannot be answered at once waits aside, so that its CANCEL_WAIT can
// be read.
type conn struct {
	s   *Server
	nc  net.Conn
	r   *bufio.Reader
	req request // the command being read
	sp  kv.Space
	ctx context.Context // ends with the connection
	end context.CancelFunc

	wmu sync.Mutex // one reply at a time

	waitCancel context.CancelFunc // the WAIT waiting aside, if any
	waitDone   chan struct{}
}

func newConn(s *Server, nc net.Conn, sp kv.Space) *conn {
	ctx, end := context.WithCancel(context.Background())
	return &conn{s: s, nc: nc, r: bufio.NewReaderSize(nc, 4096), sp: sp, ctx: ctx, end: end}
}

func (c *conn) close() {
	c.end()
	c.nc.Close()
}

// errProtocol marks input that is not the protocol: it closes the
// connection, and is logged.
var errProtocol = errors.New("not the TCPStore protocol")

func (c *conn) serve() {
	defer c.s.remove(c)
	defer c.close()
	err := c.validate()
	for err == nil {
		err = c.command()
	}
	if c.waitDone != nil {
		c.waitCancel()
		<-c.waitDone
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
		c.s.closedOnError(c.nc.RemoteAddr(), err)
	}
}

// validate reads the VALIDATE every client opens with.
func (c *conn) validate() error {
	c.nc.SetReadDeadline(time.Now().Add(c.s.validateWait))
	q := c.request()
	op, err := c.r.ReadByte()
	if err != nil {
		return err
	}
	magic, err := q.u32()
	if err != nil {
		return err
	}
	if op != opValidate || magic != validateMagic {
		return fmt.Errorf("%w: the first command is not VALIDATE (a PyTorch client older than VALIDATE?)", errProtocol)
	}
	return c.nc.SetReadDeadline(time.Time{})
}

// request begins reading the next command, within a fresh budget.
func (c *conn) request() *request {
	c.req = request{r: c.r, budget: MaxRequestBytes}
	return &c.req
}

func (c *conn) reply(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// command serves one command.
func (c *conn) command() error {
	op, err := c.r.ReadByte()
	if err != nil {
		return err
	}
	q := c.request()
	switch op {
	case opPing:
		nonce, err := q.u32()
		if err != nil {
			return err
		}
		return c.reply(appendU32(nil, nonce))
	case opSet:
		return c.set(q)
	case opCompareSet:
		return c.compareSet(q)
	case opGet:
		key, err := q.key()
		if err != nil {
			return err
		}
		v, _, err := c.sp.Get(c.ctx, key, false)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		return c.reply(appendBytes(nil, v))
	case opAdd:
		key, err := q.key()
		if err != nil {
			return err
		}
		delta, err := q.i64()
		if err != nil {
			return err
		}
		n, err := c.sp.Add(key, delta)
		if err != nil {
			return err
		}
		return c.reply(appendI64(nil, n))
	case opCheck:
		keys, err := q.keys()
		if err != nil {
			return err
		}
		ok, err := c.sp.Has(keys...)
		if err != nil {
			return err
		}
		if ok {
			return c.reply([]byte{checkReady})
		}
		return c.reply([]byte{checkNotReady})
	case opWait:
		return c.wait(q)
	case opCancelWait:
		return c.cancelWait()
	case opNumKeys:
		return c.reply(appendI64(nil, int64(c.sp.Len())))
	case opDeleteKey:
		key, err := q.key()
		if err != nil {
			return err
		}
		ok, err := c.sp.Delete(key)
		if err != nil {
			return err
		}
		var n int64
		if ok {
			n = 1
		}
		return c.reply(appendI64(nil, n))
	case opAppend:
		key, value, err := keyValue(q)
		if err != nil {
			return err
		}
		return c.sp.Append(key, value)
	case opMultiGet:
		return c.multiGet(q)
	case opMultiSet:
		return c.multiSet(q)
	case opQueuePush:
		key, value, err := keyValue(q)
		if err != nil {
			return err
		}
		return c.sp.Push(key, value)
	case opQueuePop:
		key, err := q.key()
		if err != nil {
			return err
		}
		v, n, err := c.sp.Pop(key)
		if err != nil {
			return err
		}
		b := appendI64(nil, int64(n))
		if n > 0 {
			b = appendBytes(b, v)
		}
		return c.reply(b)
	case opQueueLen:
		key, err := q.key()
		if err != nil {
			return err
		}
		n, err := c.sp.QueueLen(key)
		if err != nil {
			return err
		}
		return c.reply(appendI64(nil, int64(n)))
	}
	return fmt.Errorf("%w: opcode %d", errProtocol, op)
}

func keyValue(q *request) (string, []byte, error) {
	key, err := q.key()
	if err != nil {
		return "", nil, err
	}
	value, err := q.value()
	return key, value, err
}

func (c *conn) set(q *request) error {
	key, value, err := keyValue(q)
	if err != nil {
		return err
	}
	_, err = c.sp.Set(key, value)
	return err
}

// compareSet answers what PyTorch's server does: for a missing key and a
// non-empty expected value, that expected value.
func (c *conn) compareSet(q *request) error {
	key, err := q.key()
	if err != nil {
		return err
	}
	expected, err := q.value()
	if err != nil {
		return err
	}
	desired, err := q.value()
	if err != nil {
		return err
	}
	v, had, err := c.sp.CompareAndSwap(key, expected, desired)
	if err != nil {
		return err
	}
	if !had && len(expected) > 0 {
		v = expected
	}
	return c.reply(appendBytes(nil, v))
}

func (c *conn) multiGet(q *request) error {
	keys, err := q.keys()
	if err != nil {
		return err
	}
	var b []byte
	for _, k := range keys {
		v, _, err := c.sp.Get(c.ctx, k, false)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		if len(b)+len(v) > MaxRequestBytes {
			return fmt.Errorf("MULTI_GET reply of more than %d bytes", MaxRequestBytes)
		}
		b = appendBytes(b, v)
	}
	return c.reply(b)
}

func (c *conn) multiSet(q *request) error {
	n, err := q.count()
	if err != nil {
		return err
	}
	for range n {
		if err := c.set(q); err != nil {
			return err
		}
	}
	return nil
}

// wait answers STOP_WAITING once every key is there: at once, or from
// aside while the connection reads on, for the client's CANCEL_WAIT.
func (c *conn) wait(q *request) error {
	keys, err := q.keys()
	if err != nil {
		return err
	}
	if c.waitDone != nil {
		select {
		case <-c.waitDone:
			c.waitDone = nil
		default:
			return fmt.Errorf("%w: WAIT while a WAIT is pending", errProtocol)
		}
	}
	ok, err := c.sp.Has(keys...)
	if err != nil {
		return err
	}
	if ok {
		return c.reply([]byte{stopWaiting})
	}
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	c.waitCancel, c.waitDone = cancel, done
	c.s.waits.Add(1)
	go func() {
		defer close(done)
		defer cancel()
		defer c.s.waits.Add(-1)
		if err := c.sp.Wait(ctx, keys...); err != nil {
			if ctx.Err() == nil {
				// The space went with its round: so does the connection.
				c.s.closedOnError(c.nc.RemoteAddr(), err)
				c.close()
			}
			return
		}
		if c.reply([]byte{stopWaiting}) != nil {
			c.close()
		}
	}()
	return nil
}

// cancelWait ends the pending WAIT, if any; a STOP_WAITING it sent first
// stays before the WAIT_CANCELED, as clients expect.
func (c *conn) cancelWait() error {
	if c.waitDone != nil {
		c.waitCancel()
		<-c.waitDone
		c.waitCancel, c.waitDone = nil, nil
	}
	return c.reply([]byte{waitCanceled})
}
