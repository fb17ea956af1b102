package tcpstore

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Opcodes and reply codes of PyTorch's TCPStore, in the layout that begins
// with VALIDATE (torch 2.4 and later).
const (
	opValidate   = 0
	opSet        = 1
	opCompareSet = 2
	opGet        = 3
	opAdd        = 4
	opCheck      = 5
	opWait       = 6
	opNumKeys    = 7
	opDelete     = 8
	opAppend     = 9
	opMultiGet   = 10
	opMultiSet   = 11
	opCancelWait = 12
	opPing       = 13
	opQueuePush  = 14
	opQueuePop   = 15
	opQueueLen   = 16

	validateMagic = 0x3C85F7CE

	replyReady        = 0 // CHECK
	replyNotReady     = 1 // CHECK
	replyStopWaiting  = 0 // WAIT
	replyWaitCanceled = 1 // CANCEL_WAIT
)

// Reply bounds: torch's own server takes payloads up to 8 MiB and 128 Ki
// keys a request, so anything longer is a broken or hostile peer.
const (
	maxReplyBytes  = 8<<20 + 64<<10
	maxReplyValues = 131072
)

// request builds one request in memory so that it goes out in one write.
type request []byte

func (b request) op(op byte) request     { return append(b, op) }
func (b request) u32(v uint32) request   { return binary.LittleEndian.AppendUint32(b, v) }
func (b request) u64(v uint64) request   { return binary.LittleEndian.AppendUint64(b, v) }
func (b request) i64(v int64) request    { return b.u64(uint64(v)) }
func (b request) str(s string) request   { return append(b.u64(uint64(len(s))), s...) }
func (b request) bytes(v []byte) request { return append(b.u64(uint64(len(v))), v...) }
func (b request) keys(ks []string) request {
	b = b.u64(uint64(len(ks)))
	for _, k := range ks {
		b = b.str(k)
	}
	return b
}

func readU8(r *bufio.Reader) (byte, error) { return r.ReadByte() }

func readU32(r *bufio.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func readI64(r *bufio.Reader) (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

// readBytes reads a u64 length and that many bytes, refusing a length no
// server of ours or torch's would send before allocating for it.
func readBytes(r *bufio.Reader) ([]byte, error) {
	n, err := readI64(r)
	if err != nil {
		return nil, err
	}
	if uint64(n) > maxReplyBytes {
		return nil, fmt.Errorf("reply value of %d bytes is over the %d-byte bound", uint64(n), maxReplyBytes)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}
