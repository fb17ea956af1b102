package rendezvous

import (
	"context"
	"fmt"
	"net"
	"os/user"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// peerCred is what the kernel recorded about the process that connected to
// the store's Unix socket, at connect time (SO_PEERCRED, SO_PEERGROUPS). It
// is the caller's identity there; nothing in a request can change it.
type peerCred struct {
	credentials.CommonAuthInfo
	pid      int32
	uid, gid uint32
	groups   []uint32
}

func (peerCred) AuthType() string { return "unix-peer-credentials" }

// identity is the caller as a job's owner.
func (p peerCred) identity() *musterv1.Identity {
	id := &musterv1.Identity{Uid: p.uid, Gid: p.gid, Groups: append([]uint32(nil), p.groups...)}
	if u, err := user.LookupId(strconv.FormatUint(uint64(p.uid), 10)); err == nil {
		id.User = u.Username
	}
	return id
}

// transportCreds handshakes the store's connections: a Unix socket's caller
// is known by its peer credentials; TCP goes to tcp (TLS or plain text, where
// a token then authenticates each call).
type transportCreds struct {
	tcp credentials.TransportCredentials
}

func (c transportCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return c.tcp.ServerHandshake(conn)
	}
	pc, err := readPeerCred(uc)
	if err != nil {
		return nil, nil, err
	}
	return conn, pc, nil
}

func (c transportCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.tcp.ClientHandshake(ctx, authority, conn)
}

func (c transportCreds) Info() credentials.ProtocolInfo { return c.tcp.Info() }

func (c transportCreds) Clone() credentials.TransportCredentials {
	return transportCreds{tcp: c.tcp.Clone()}
}

// OverrideServerName is part of the interface; gRPC no longer calls it, and
// the store never dials out with these credentials.
func (c transportCreds) OverrideServerName(string) error { return nil }

// readPeerCred asks the kernel who is at the other end of conn.
func readPeerCred(conn *net.UnixConn) (peerCred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return peerCred{}, err
	}
	var pc peerCred
	var uerr, gerr error
	err = raw.Control(func(fd uintptr) {
		var u *unix.Ucred
		if u, uerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); uerr == nil {
			pc.pid, pc.uid, pc.gid = u.Pid, u.Uid, u.Gid
		}
		pc.groups, gerr = peerGroups(int(fd))
	})
	switch {
	case err != nil:
		return peerCred{}, err
	case uerr != nil:
		return peerCred{}, fmt.Errorf("peer credentials: %w", uerr)
	case gerr != nil:
		return peerCred{}, fmt.Errorf("peer groups: %w", gerr)
	}
	pc.SecurityLevel = credentials.PrivacyAndIntegrity
	return pc, nil
}

// peerGroups reads the peer's supplementary groups (SO_PEERGROUPS, Linux 4.13).
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE && int(n/4) > len(buf):
			buf = make([]uint32, n/4)
			continue
		case e != 0:
			return nil, e
		}
		return buf[:n/4], nil
	}
}
