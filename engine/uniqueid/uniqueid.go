// Package uniqueid lays out NCCL's ncclUniqueId: the bytes the store mints
// for a round and every rank passes to ncclCommInitRank. It needs no NCCL.
package uniqueid

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
)

// Bytes is sizeof(ncclUniqueId) in every NCCL release muster supports.
const Bytes = 128

// ID is NCCL's ncclUniqueId: the bootstrap root's socket address behind
// a magic number that every rank must share (layout in DESIGN.md).
type ID [Bytes]byte

// New mints an ID whose bootstrap root listens on root, with a random
// magic so that IDs of two rounds never match.
func New(root netip.AddrPort) (ID, error) {
	var magic [8]byte
	if _, err := rand.Read(magic[:]); err != nil {
		return ID{}, fmt.Errorf("mint nccl unique id: %w", err)
	}
	return NewWithMagic(binary.LittleEndian.Uint64(magic[:]), root)
}

// NewWithMagic lays out an ID with a chosen magic; tests and tools
// that must reproduce NCCL's own bytes use it.
func NewWithMagic(magic uint64, root netip.AddrPort) (ID, error) {
	var id ID
	if !root.IsValid() || root.Port() == 0 {
		return id, fmt.Errorf("nccl unique id: invalid root address %q", root.String())
	}
	binary.LittleEndian.PutUint64(id[0:8], magic)
	addr := root.Addr()
	sa := id[8:36] // union { sockaddr_in; sockaddr_in6 } of 28 bytes
	if addr.Is4() || addr.Is4In6() {
		a4 := addr.Unmap().As4()
		binary.LittleEndian.PutUint16(sa[0:2], 2) // AF_INET
		binary.BigEndian.PutUint16(sa[2:4], root.Port())
		copy(sa[4:8], a4[:])
		return id, nil
	}
	a16 := addr.As16()
	binary.LittleEndian.PutUint16(sa[0:2], 10) // AF_INET6
	binary.BigEndian.PutUint16(sa[2:4], root.Port())
	// sa[4:8] is sin6_flowinfo, left zero.
	copy(sa[8:24], a16[:])
	binary.LittleEndian.PutUint32(sa[24:28], scopeID(addr))
	return id, nil
}

// scopeID turns a numeric IPv6 zone into sin6_scope_id; a named zone is
// resolved by the kernel on the node that binds it, so it stays 0 here.
func scopeID(addr netip.Addr) uint32 {
	var n uint32
	if _, err := fmt.Sscanf(addr.Zone(), "%d", &n); err != nil {
		return 0
	}
	return n
}

// Root returns the bootstrap root address encoded in the ID.
func (id ID) Root() (netip.AddrPort, error) {
	sa := id[8:36]
	port := binary.BigEndian.Uint16(sa[2:4])
	switch binary.LittleEndian.Uint16(sa[0:2]) {
	case 2:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port), nil
	case 10:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("nccl unique id: unknown address family %d", binary.LittleEndian.Uint16(sa[0:2]))
}

// Hex is the form muster passes in MUSTER_NCCL_UNIQUE_ID: 256 lowercase hex digits.
func (id ID) Hex() string { return hex.EncodeToString(id[:]) }

// Parse decodes the 256-digit hex form.
func Parse(s string) (ID, error) {
	var id ID
	if len(s) != 2*Bytes {
		return id, fmt.Errorf("nccl unique id: want %d hex digits, got %d", 2*Bytes, len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("nccl unique id: %w", err)
	}
	return id, nil
}
