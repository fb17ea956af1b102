package security

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// TCPPeerOwner looks up, on this host, the socket at the other end of a
// TCP connection this process accepted, and returns the uid that owns it.
// found is false when no socket of this host (and network namespace) is
// the connection's other end: the peer is another host, or it closed its
// socket already. It asks the kernel by the connection's addresses and
// ports (netlink sock_diag): one lookup, however many sockets there are.
func TCPPeerOwner(c net.Conn) (uid uint32, found bool, err error) {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, false, fmt.Errorf("not a TCP connection: %s", c.RemoteAddr())
	}
	// The peer's socket: its own address is our remote end, its peer us.
	return TCPSocketOwner(remote.AddrPort(), local.AddrPort())
}

// TCPSocketOwner looks up the connected TCP socket of this host (and
// network namespace) whose own address is local and whose peer is remote,
// and returns the uid that owns it: the file-system uid of the process
// that made it. found is false when there is none, or it is closed.
func TCPSocketOwner(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	d, err := OpenSockDiag()
	if err != nil {
		return 0, false, err
	}
	defer d.Close()
	return d.Owner(local, remote)
}

// SockDiag asks the kernel who owns TCP sockets (netlink sock_diag), one
// socket at a time, over one netlink socket: for many lookups in a row.
// It is not safe for concurrent use.
type SockDiag struct {
	fd  int
	seq uint32
	buf []byte
}

// OpenSockDiag opens a netlink socket for lookups; Close closes it.
func OpenSockDiag() (*SockDiag, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	// A lost answer must not hold the caller for ever.
	tv := unix.Timeval{Sec: 2}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &SockDiag{fd: fd, buf: make([]byte, 4096)}, nil
}

// Close closes the netlink socket.
func (d *SockDiag) Close() error { return unix.Close(d.fd) }

// The kernel's inet_diag messages (linux/inet_diag.h).
const (
	sizeofNlMsghdr      = 16
	sizeofInetDiagReqV2 = 56
	sizeofInetDiagMsg   = 72
	tcpTimeWait         = 6
	tcpListen           = 10
	// staleReplies bounds the late answers to earlier lookups (after a
	// timeout) that one lookup reads past before it gives up.
	staleReplies = 8
)

// Owner returns the uid of the connected TCP socket whose own address is
// local and whose peer is remote; found is false when there is none.
func (d *SockDiag) Owner(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	src := netip.AddrPortFrom(local.Addr().Unmap().WithZone(""), local.Port())
	dst := netip.AddrPortFrom(remote.Addr().Unmap().WithZone(""), remote.Port())
	if !src.Addr().IsValid() || !dst.Addr().IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		return 0, false, nil
	}
	d.seq++
	if d.seq == 0 {
		d.seq = 1
	}
	family := uint8(unix.AF_INET)
	if src.Addr().Is6() {
		family = unix.AF_INET6
	}
	req := make([]byte, sizeofNlMsghdr+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], d.seq)
	r := req[sizeofNlMsghdr:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	putSockID(r[8:], src, dst)
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false, fmt.Errorf("sock_diag: %w", err)
	}
	for range staleReplies {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err != nil {
			return 0, false, fmt.Errorf("sock_diag: %w", err)
		}
		uid, found, err := parseDiagReply(d.buf[:n], d.seq, src, dst)
		if !errors.Is(err, errStaleReply) {
			return uid, found, err
		}
	}
	return 0, false, errors.New("sock_diag: no answer to this lookup")
}

// errStaleReply is an answer to an earlier lookup.
var errStaleReply = errors.New("sock_diag: the answer to an earlier lookup")

// parseDiagReply reads the kernel's answer to lookup seq of the socket
// src -> dst: its owner's uid, or found false when there is no such
// connected socket.
func parseDiagReply(b []byte, seq uint32, src, dst netip.AddrPort) (uint32, bool, error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil || len(msgs) == 0 {
		return 0, false, fmt.Errorf("sock_diag: a reply of %d bytes: %v", len(b), err)
	}
	m := msgs[0]
	if m.Header.Seq != seq {
		return 0, false, errStaleReply
	}
	ne := binary.NativeEndian
	switch m.Header.Type {
	case unix.NLMSG_ERROR:
		if len(m.Data) < 4 {
			return 0, false, errors.New("sock_diag: a short error")
		}
		if errno := syscall.Errno(-int32(ne.Uint32(m.Data))); errno != syscall.ENOENT {
			return 0, false, fmt.Errorf("sock_diag: %w", errno)
		}
		return 0, false, nil
	case unix.SOCK_DIAG_BY_FAMILY:
	default:
		return 0, false, fmt.Errorf("sock_diag: a reply of type %d", m.Header.Type)
	}
	d := m.Data
	if len(d) < sizeofInetDiagMsg {
		return 0, false, errors.New("sock_diag: a short reply")
	}
	// Only the connection's own socket counts: not a listener on its port,
	// nor a closed one, whose owner the kernel no longer knows; and only
	// the socket asked about.
	state := d[1]
	sport, dport := binary.BigEndian.Uint16(d[4:]), binary.BigEndian.Uint16(d[6:])
	if state == tcpTimeWait || state == tcpListen || sport != src.Port() || dport != dst.Port() || !sameAddrs(d[8:], src, dst) {
		return 0, false, nil
	}
	return ne.Uint32(d[64:]), true, nil
}

// sameAddrs says whether the addresses of struct inet_diag_sockid at b
// (from its source address on) are src's and dst's.
func sameAddrs(b []byte, src, dst netip.AddrPort) bool {
	if len(b) < 32 {
		return false
	}
	// An IPv6 socket that reached an IPv4 address has it mapped.
	s, d := src.Addr().As16(), dst.Addr().As16()
	if [16]byte(b[0:16]) == s && [16]byte(b[16:32]) == d {
		return true
	}
	if !src.Addr().Is4() {
		return false
	}
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	return [4]byte(b[0:4]) == s4 && [4]byte(b[16:20]) == d4
}

// putSockID writes struct inet_diag_sockid: ports and addresses in network
// order, no interface, no cookie.
func putSockID(b []byte, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(b[0:], src.Port())
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	s, d := src.Addr().As16(), dst.Addr().As16()
	if src.Addr().Is4() {
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		copy(b[4:], s4[:])
		copy(b[20:], d4[:])
	} else {
		copy(b[4:], s[:])
		copy(b[20:], d[:])
	}
	binary.NativeEndian.PutUint32(b[36:], 0)
	binary.NativeEndian.PutUint32(b[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(b[44:], ^uint32(0))
}

// maxEndLen bounds the text of one end of a connection: the longest IPv6
// address and port is 47 bytes.
const maxEndLen = 64

// ParseTCPEnds parses the two ends of a TCP connection, IP:PORT each, as
// agents and the store pass them: both of one family (an IPv4-mapped IPv6
// address counts as IPv4), neither unspecified, no zone, no port 0.
func ParseTCPEnds(a, b string) (netip.AddrPort, netip.AddrPort, error) {
	pa, err := parseTCPEnd(a)
	if err != nil {
		return netip.AddrPort{}, netip.AddrPort{}, err
	}
	pb, err := parseTCPEnd(b)
	if err != nil {
		return netip.AddrPort{}, netip.AddrPort{}, err
	}
	if pa.Addr().Is4() != pb.Addr().Is4() {
		return netip.AddrPort{}, netip.AddrPort{}, fmt.Errorf("%s and %s are of two address families", pa, pb)
	}
	return pa, pb, nil
}

func parseTCPEnd(s string) (netip.AddrPort, error) {
	if len(s) > maxEndLen {
		return netip.AddrPort{}, fmt.Errorf("a connection's end of %d bytes", len(s))
	}
	ap, err := netip.ParseAddrPort(s)
	switch {
	case err != nil:
		return netip.AddrPort{}, fmt.Errorf("a connection's end: %w", err)
	case ap.Addr().Zone() != "":
		return netip.AddrPort{}, fmt.Errorf("a connection's end with a zone: %q", s)
	case ap.Addr().IsUnspecified() || ap.Port() == 0:
		return netip.AddrPort{}, fmt.Errorf("%s is no connection's end", ap)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
