package tcpstore

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Reply bounds: torch's own server takes payloads up to 8 MiB and 128 Ki
// keys a request, so anything longer is a broken or hostile peer.
const (
	maxReplyBytes  = 8<<20 + 64<<10
	maxReplyValues = 131072
)

// query builds one request in memory so that it goes out in one write.
type query []byte

func (b query) op(op byte) query     { return append(b, op) }
func (b query) u32(v uint32) query   { return binary.LittleEndian.AppendUint32(b, v) }
func (b query) u64(v uint64) query   { return binary.LittleEndian.AppendUint64(b, v) }
func (b query) i64(v int64) query    { return b.u64(uint64(v)) }
func (b query) str(s string) query   { return append(b.u64(uint64(len(s))), s...) }
func (b query) bytes(v []byte) query { return append(b.u64(uint64(len(v))), v...) }
func (b query) keys(ks []string) query {
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
