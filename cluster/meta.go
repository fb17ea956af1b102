package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// MetaMaxSize is the most bytes of node metadata memberlist gossips per member.
const MetaMaxSize = 512

// Bounds on the metadata's fields, checked on encode and decode.
const (
	maxGPUs            = 1 << 16
	maxAddrLen         = 255
	maxVersionLen      = 64
	metaFormat    byte = 1
	flagStore     byte = 1 << 0
	flagLeaving   byte = 1 << 1
	flagStarting  byte = 1 << 2
)

// Meta is what a member tells the others about itself through gossip.
type Meta struct {
	GPUsTotal int    // GPUs the node offers
	GPUsFree  int    // of those, not held by a job
	GRPCAddr  string // the agent's gRPC address, host:port
	Store     bool   // the node hosts the rendezvous store (GRPCAddr serves it)
	// StoreStarting says the store is not yet sure to be the cluster's: it may still yield to
	// another store started at the same time. Agents do not register with it yet.
	StoreStarting bool
	Version       string // the agent's build version
	// NodeTimeout is the member's node timeout, whole milliseconds; 0 when not said. It is
	// the same on every member, and a member whose value differs is told in the logs.
	NodeTimeout time.Duration

	// leaving is set by Leave just before the member leaves: memberlist reports a member
	// that left and one that died alike, so the others tell them apart by this flag.
	leaving bool
}

// ErrMeta is wrapped by every metadata encoding or decoding error.
var ErrMeta = errors.New("cluster: bad node metadata")

func (m Meta) validate() error {
	switch {
	case m.GPUsTotal < 0 || m.GPUsTotal > maxGPUs:
		return fmt.Errorf("%w: GPUs total %d out of range 0..%d", ErrMeta, m.GPUsTotal, maxGPUs)
	case m.GPUsFree < 0 || m.GPUsFree > m.GPUsTotal:
		return fmt.Errorf("%w: GPUs free %d out of range 0..%d", ErrMeta, m.GPUsFree, m.GPUsTotal)
	case len(m.GRPCAddr) > maxAddrLen || !utf8.ValidString(m.GRPCAddr):
		return fmt.Errorf("%w: gRPC address longer than %d bytes or not UTF-8", ErrMeta, maxAddrLen)
	case len(m.Version) > maxVersionLen || !utf8.ValidString(m.Version):
		return fmt.Errorf("%w: version longer than %d bytes or not UTF-8", ErrMeta, maxVersionLen)
	case m.NodeTimeout < 0 || m.NodeTimeout > MaxNodeTimeout || m.NodeTimeout%time.Millisecond != 0:
		return fmt.Errorf("%w: node timeout %s not whole milliseconds up to %s", ErrMeta, m.NodeTimeout, MaxNodeTimeout)
	}
	return nil
}

// MarshalBinary encodes m compactly:
//
//	format byte (1) | flags byte | uvarint GPUs total | uvarint GPUs free |
//	uvarint len + gRPC address | uvarint len + version | uvarint node timeout ms
//
// The node timeout came last, later: metadata without it decodes with NodeTimeout 0.
// Bytes after these fields are ignored by this decoder, so a later format can append fields.
// The field bounds keep the result far below MetaMaxSize (at most about 340 bytes).
func (m Meta) MarshalBinary() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 16+len(m.GRPCAddr)+len(m.Version))
	var flags byte
	if m.Store {
		flags |= flagStore
	}
	if m.leaving {
		flags |= flagLeaving
	}
	if m.StoreStarting {
		flags |= flagStarting
	}
	b = append(b, metaFormat, flags)
	b = binary.AppendUvarint(b, uint64(m.GPUsTotal))
	b = binary.AppendUvarint(b, uint64(m.GPUsFree))
	b = binary.AppendUvarint(b, uint64(len(m.GRPCAddr)))
	b = append(b, m.GRPCAddr...)
	b = binary.AppendUvarint(b, uint64(len(m.Version)))
	b = append(b, m.Version...)
	b = binary.AppendUvarint(b, uint64(m.NodeTimeout/time.Millisecond))
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMeta, len(b), MetaMaxSize)
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Any input, however malformed, gives an
// error and never a panic; a decoded Meta satisfies the same bounds as an encoded one.
func (m *Meta) UnmarshalBinary(b []byte) error {
	if len(b) > MetaMaxSize {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrMeta, len(b), MetaMaxSize)
	}
	if len(b) < 2 {
		return fmt.Errorf("%w: %d bytes, too short", ErrMeta, len(b))
	}
	if b[0] != metaFormat {
		return fmt.Errorf("%w: unknown format %d", ErrMeta, b[0])
	}
	d := decoder{b: b[2:]}
	out := Meta{Store: b[1]&flagStore != 0, StoreStarting: b[1]&flagStarting != 0, leaving: b[1]&flagLeaving != 0}
	total, free := d.uvarint(maxGPUs), d.uvarint(maxGPUs)
	out.GRPCAddr = d.str(maxAddrLen)
	out.Version = d.str(maxVersionLen)
	if len(d.b) > 0 && d.err == nil {
		out.NodeTimeout = time.Duration(d.uvarint(uint64(MaxNodeTimeout/time.Millisecond))) * time.Millisecond
	}
	if d.err != nil {
		return d.err
	}
	out.GPUsTotal, out.GPUsFree = int(total), int(free)
	if err := out.validate(); err != nil {
		return err
	}
	*m = out
	return nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: truncated or overlong number", ErrMeta)
		return 0
	}
	if v > limit {
		d.err = fmt.Errorf("%w: %d is more than %d", ErrMeta, v, limit)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(limit int) string {
	n := d.uvarint(uint64(limit))
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.err = fmt.Errorf("%w: string of %d bytes truncated", ErrMeta, n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
