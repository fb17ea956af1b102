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
	// The peer's socket: its source is our remote end, its destination us.
	src, dst := remote.AddrPort(), local.AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if src.Addr().Is4() != dst.Addr().Is4() {
		return 0, false, nil
	}
	return sockDiagOwner(src, dst)
}

// The kernel's inet_diag messages (linux/inet_diag.h).
const (
	sizeofNlMsghdr      = 16
	sizeofInetDiagReqV2 = 56
	sizeofInetDiagMsg   = 72
	tcpTimeWait         = 6
	tcpListen           = 10
)

func sockDiagOwner(src, dst netip.AddrPort) (uint32, bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, false, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	// A lost answer must not hold the caller for ever.
	tv := unix.Timeval{Sec: 2}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	family := uint8(unix.AF_INET)
	if src.Addr().Is6() {
		family = unix.AF_INET6
	}
	req := make([]byte, sizeofNlMsghdr+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[sizeofNlMsghdr:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	putSockID(r[8:], src, dst)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, false, fmt.Errorf("sock_diag: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return 0, false, fmt.Errorf("sock_diag: a reply of %d bytes: %v", n, err)
	}
	m := msgs[0]
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
	// nor a closed one, whose owner the kernel no longer knows.
	state := d[1]
	sport, dport := binary.BigEndian.Uint16(d[4:]), binary.BigEndian.Uint16(d[6:])
	if state == tcpTimeWait || state == tcpListen || sport != src.Port() || dport != dst.Port() {
		return 0, false, nil
	}
	return ne.Uint32(d[64:]), true, nil
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
