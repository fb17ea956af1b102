// Package ranklog keeps each rank's output of a node's recent jobs, as
// journald keeps a unit's: one append-only file of records per rank, each
// record a piece of one stream with its sequence number in that stream and
// the time it was read, the whole bounded by size and age.
package ranklog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxData is the most output one record holds: a worker's output comes in
// pieces of at most this size (supervise.MaxChunk).
const MaxData = 64 << 10

// The two streams a record may be of, as the wire numbers them.
const (
	Stdout = 1
	Stderr = 2
)

// A record on disk: a 4-byte big-endian length of what follows, then the
// stream (1 byte), flags (1 byte), the sequence number (8 bytes), the time
// in Unix nanoseconds (8 bytes) and the data.
const (
	headerBytes = 4
	fixedBytes  = 1 + 1 + 8 + 8
	flagPaused  = 1
)

// Record is one piece of a rank's output.
type Record struct {
	Stream   int
	Paused   bool // a line left unfinished for a while (a progress bar)
	Seq      uint64
	UnixNano int64
	Data     []byte
}

// ErrCorrupt is a record that no writer writes.
var ErrCorrupt = errors.New("corrupt rank log record")

// appendRecord appends r's encoding to b.
func appendRecord(b []byte, r Record) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(fixedBytes+len(r.Data)))
	var flags byte
	if r.Paused {
		flags |= flagPaused
	}
	b = append(b, byte(r.Stream), flags)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(r.UnixNano))
	return append(b, r.Data...)
}

// readRecord reads the next record. It returns io.EOF at a clean end,
// io.ErrUnexpectedEOF for a record not yet whole (a writer mid-append, or
// one a crash cut short), and an error wrapping ErrCorrupt for bytes no
// writer wrote. The record's size counts its header.
func readRecord(br *bufio.Reader) (r Record, size int, err error) {
	var hdr [headerBytes + fixedBytes]byte
	n, err := io.ReadFull(br, hdr[:])
	switch {
	case err == io.EOF:
		return r, 0, io.EOF
	case err == io.ErrUnexpectedEOF:
		return r, n, io.ErrUnexpectedEOF
	case err != nil:
		return r, n, err
	}
	length := binary.BigEndian.Uint32(hdr[:4])
	if length < fixedBytes || length > fixedBytes+MaxData {
		return r, n, fmt.Errorf("%w: length %d", ErrCorrupt, length)
	}
	r.Stream = int(hdr[4])
	if r.Stream != Stdout && r.Stream != Stderr {
		return r, n, fmt.Errorf("%w: stream %d", ErrCorrupt, r.Stream)
	}
	if hdr[5]&^flagPaused != 0 {
		return r, n, fmt.Errorf("%w: flags %#x", ErrCorrupt, hdr[5])
	}
	r.Paused = hdr[5]&flagPaused != 0
	r.Seq = binary.BigEndian.Uint64(hdr[6:14])
	r.UnixNano = int64(binary.BigEndian.Uint64(hdr[14:22]))
	r.Data = make([]byte, length-fixedBytes)
	m, err := io.ReadFull(br, r.Data)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return r, n + m, err
}
