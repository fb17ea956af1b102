package security

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

// PeerCred is what the kernel recorded about the process that connected to
// the store's Unix socket, at connect time (SO_PEERCRED, SO_PEERGROUPS). It
// is the caller's identity there; nothing in a request can change it.
type PeerCred struct {
	credentials.CommonAuthInfo
	PID      int32
	UID, GID uint32
	Groups   []uint32
}

// AuthType names the kind of credential to gRPC.
func (PeerCred) AuthType() string { return "unix-peer-credentials" }

// Identity is the caller as a job's owner.
func (p PeerCred) Identity() *musterv1.Identity {
	id := &musterv1.Identity{Uid: p.UID, Gid: p.GID, Groups: append([]uint32(nil), p.Groups...)}
	if u, err := user.LookupId(strconv.FormatUint(uint64(p.UID), 10)); err == nil {
		id.User = u.Username
	}
	return id
}

// TransportCreds handshakes the store's connections: a Unix socket's caller
// is known by its peer credentials; TCP goes to TCP (TLS or plain text, where
// a token then authenticates each call).
type TransportCreds struct {
	TCP credentials.TransportCredentials
}

func (c TransportCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return c.TCP.ServerHandshake(conn)
	}
	pc, err := ReadPeerCred(uc)
	if err != nil {
		return nil, nil, err
	}
	return conn, pc, nil
}

func (c TransportCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TCP.ClientHandshake(ctx, authority, conn)
}

func (c TransportCreds) Info() credentials.ProtocolInfo { return c.TCP.Info() }

func (c TransportCreds) Clone() credentials.TransportCredentials {
	return TransportCreds{TCP: c.TCP.Clone()}
}

// OverrideServerName is part of the interface; gRPC no longer calls it, and
// the store never dials out with these credentials.
func (c TransportCreds) OverrideServerName(string) error { return nil }

// ReadPeerCred asks the kernel who is at the other end of conn.
func ReadPeerCred(conn *net.UnixConn) (PeerCred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return PeerCred{}, err
	}
	var pc PeerCred
	var uerr, gerr error
	err = raw.Control(func(fd uintptr) {
		var u *unix.Ucred
		if u, uerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); uerr == nil {
			pc.PID, pc.UID, pc.GID = u.Pid, u.Uid, u.Gid
		}
		pc.Groups, gerr = peerGroups(int(fd))
	})
	switch {
	case err != nil:
		return PeerCred{}, err
	case uerr != nil:
		return PeerCred{}, fmt.Errorf("peer credentials: %w", uerr)
	case gerr != nil:
		return PeerCred{}, fmt.Errorf("peer groups: %w", gerr)
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
