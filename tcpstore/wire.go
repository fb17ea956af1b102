// Package tcpstore serves PyTorch's TCPStore wire protocol on a job's key
// space, so that every rank of a torch job is a client of a store its node's
// agent holds (TORCHELASTIC_USE_AGENT_STORE=True) and no rank binds
// MASTER_PORT. It speaks the protocol of PyTorch releases whose clients open
// with VALIDATE (the opcode table below); older clients are refused.
package tcpstore

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/musterhq/muster/kv"
)

// Opcodes: one byte, in the order of PyTorch's QueryType.
const (
	opValidate   = 0
	opSet        = 1
	opCompareSet = 2
	opGet        = 3
	opAdd        = 4
	opCheck      = 5
	opWait       = 6
	opNumKeys    = 7
	opDeleteKey  = 8
	opAppend     = 9
	opMultiGet   = 10
	opMultiSet   = 11
	opCancelWait = 12
	opPing       = 13
	opQueuePush  = 14
	opQueuePop   = 15
	opQueueLen   = 16
)

// Replies of CHECK and WAIT.
const (
	checkReady    = 0
	checkNotReady = 1
	stopWaiting   = 0
	waitCanceled  = 1
)

// validateMagic follows VALIDATE: a client without it is not one we serve.
const validateMagic = 0x3C85F7CE

// The bounds of PyTorch's own (libuv) server, and what one request may
// carry in all, so that one connection cannot make the agent hold more.
const (
	MaxKeyBytes     = 8 << 10
	MaxValueBytes   = 8 << 20
	MaxRequestKeys  = 128 << 10
	MaxRequestBytes = 64 << 20
	// MaxConnections bounds the connections held at once.
	MaxConnections = 1 << 16
)

// Limits are what the key space behind a Server should enforce: PyTorch's
// per-key bounds, and at most 256 MiB and 256 Ki keys a store, far above
// what ranks keep (unique IDs, counters), far below what would starve a node.
var Limits = kv.Limits{KeyBytes: MaxKeyBytes, ValueBytes: MaxValueBytes, Keys: 256 << 10, TotalBytes: 256 << 20, BinaryKeys: true}

// request reads one command's fields, within its byte budget.
type request struct {
	r      *bufio.Reader
	budget int
	buf    [8]byte
}

func (q *request) fixed(n int) ([]byte, error) {
	if _, err := io.ReadFull(q.r, q.buf[:n]); err != nil {
		return nil, err
	}
	return q.buf[:n], nil
}

func (q *request) u32() (uint32, error) {
	b, err := q.fixed(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (q *request) u64() (uint64, error) {
	b, err := q.fixed(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (q *request) i64() (int64, error) {
	v, err := q.u64()
	return int64(v), err
}

// count reads how many keys follow, at most MaxRequestKeys.
func (q *request) count() (int, error) {
	n, err := q.u64()
	if err != nil {
		return 0, err
	}
	if n > MaxRequestKeys {
		return 0, fmt.Errorf("%d keys in one request, more than %d", n, MaxRequestKeys)
	}
	return int(n), nil
}

// bytes reads a length-prefixed string of at most limit bytes. Memory grows
// with what arrives, not with what the length claims.
func (q *request) bytes(what string, limit int) ([]byte, error) {
	n, err := q.u64()
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("%s of %d bytes, more than %d", what, n, limit)
	}
	if int(n) > q.budget {
		return nil, fmt.Errorf("request of more than %d bytes", MaxRequestBytes)
	}
	q.budget -= int(n)
	b := make([]byte, 0, min(int(n), 4<<10))
	for len(b) < int(n) {
		if len(b) == cap(b) {
			// Twice as much each time, and never past the length.
			b = append(make([]byte, 0, min(int(n), 2*cap(b))), b...)
		}
		m, err := q.r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil && len(b) < int(n) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

func (q *request) key() (string, error) {
	b, err := q.bytes("key", MaxKeyBytes)
	return string(b), err
}

func (q *request) value() ([]byte, error) { return q.bytes("value", MaxValueBytes) }

func (q *request) keys() ([]string, error) {
	n, err := q.count()
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, min(n, 1024))
	for range n {
		k, err := q.key()
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Replies are built whole, then written with one call.
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendI64(b []byte, v int64) []byte  { return binary.LittleEndian.AppendUint64(b, uint64(v)) }

func appendBytes(b, v []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(v))), v...)
}
