package security

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// diagReply is the kernel's answer to lookup seq: one inet_diag_msg for a
// socket src -> dst in state, owned by uid.
func diagReply(seq uint32, src, dst netip.AddrPort, state uint8, uid uint32) []byte {
	b := make([]byte, sizeofNlMsghdr+sizeofInetDiagMsg)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint32(b[8:], seq)
	d := b[sizeofNlMsghdr:]
	d[0], d[1] = unix.AF_INET, state
	if src.Addr().Is6() {
		d[0] = unix.AF_INET6
	}
	putSockID(d[4:], src, dst)
	ne.PutUint32(d[64:], uid)
	return b
}

// diagError is the kernel's error answer to lookup seq.
func diagError(seq uint32, errno unix.Errno) []byte {
	b := make([]byte, sizeofNlMsghdr+4+sizeofNlMsghdr)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.NLMSG_ERROR)
	ne.PutUint32(b[8:], seq)
	ne.PutUint32(b[sizeofNlMsghdr:], uint32(-int32(errno)))
	return b
}

func TestParseDiagReply(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.0.0.1:29500")
	src6, dst6 := netip.MustParseAddrPort("[fd00::2]:40000"), netip.MustParseAddrPort("[fd00::1]:29500")
	const established = 1
	for _, tt := range []struct {
		name     string
		reply    []byte
		src, dst netip.AddrPort
		uid      uint32
		found    bool
		err      string
	}{
		{"the socket", diagReply(7, src, dst, established, 65534), src, dst, 65534, true, ""},
		{"an IPv6 socket", diagReply(7, src6, dst6, established, 1000), src6, dst6, 1000, true, ""},
		{"an IPv6 socket of an IPv4 connection", diagReply(7, netip.AddrPortFrom(netip.AddrFrom16(src.Addr().As16()), src.Port()),
			netip.AddrPortFrom(netip.AddrFrom16(dst.Addr().As16()), dst.Port()), established, 1000), src, dst, 1000, true, ""},
		{"none", diagError(7, unix.ENOENT), src, dst, 0, false, ""},
		{"closed", diagReply(7, src, dst, tcpTimeWait, 0), src, dst, 0, false, ""},
		{"a listener", diagReply(7, src, dst, tcpListen, 0), src, dst, 0, false, ""},
		{"another port", diagReply(7, netip.AddrPortFrom(src.Addr(), 40001), dst, established, 0), src, dst, 0, false, ""},
		{"another address", diagReply(7, netip.MustParseAddrPort("10.0.0.3:40000"), dst, established, 0), src, dst, 0, false, ""},
		{"another peer", diagReply(7, src, netip.MustParseAddrPort("10.0.0.9:29500"), established, 0), src, dst, 0, false, ""},
		{"an error", diagError(7, unix.EPERM), src, dst, 0, false, "operation not permitted"},
		{"short", diagReply(7, src, dst, established, 0)[:40], src, dst, 0, false, "sock_diag"},
		{"nothing", nil, src, dst, 0, false, "sock_diag"},
		{"an earlier lookup's", diagReply(6, src, dst, established, 0), src, dst, 0, false, errStaleReply.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			uid, found, err := parseDiagReply(tt.reply, 7, tt.src, tt.dst)
			if uid != tt.uid || found != tt.found || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("uid %d, found %v, %v; want uid %d, found %v, %q", uid, found, err, tt.uid, tt.found, tt.err)
			}
		})
	}
}

// Whatever the kernel's socket sends, the parser returns, and finds a
// socket only where the reply names the one asked about.
func FuzzParseDiagReply(f *testing.F) {
	src, dst := netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.0.0.1:29500")
	f.Add(diagReply(1, src, dst, 1, 65534))
	f.Add(diagError(1, unix.ENOENT))
	f.Add(diagError(1, unix.EPERM))
	f.Add(append(diagReply(1, src, dst, 1, 0), diagReply(1, src, dst, 1, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, found, err := parseDiagReply(b, 1, src, dst)
		if found && err != nil {
			t.Fatalf("found, and %v", err)
		}
		if found {
			d := b[sizeofNlMsghdr:]
			if binary.BigEndian.Uint16(d[4:]) != src.Port() || binary.BigEndian.Uint16(d[6:]) != dst.Port() || !sameAddrs(d[8:], src, dst) {
				t.Fatalf("found a socket that is not the one asked about: % x", d[:48])
			}
		}
		if errors.Is(err, errStaleReply) && len(b) >= 12 && binary.NativeEndian.Uint32(b[8:]) == 1 {
			t.Fatal("the answer to this lookup taken as an earlier one's")
		}
	})
}

func TestParseTCPEnds(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		err  string
	}{
		{"10.0.0.2:40000", "10.0.0.1:29500", ""},
		{"[fd00::2]:40000", "[fd00::1]:29500", ""},
		{"[::ffff:10.0.0.2]:40000", "10.0.0.1:29500", ""},
		{"10.0.0.2:40000", "[fd00::1]:29500", "two address families"},
		{"10.0.0.2", "10.0.0.1:29500", "connection's end"},
		{"host:40000", "10.0.0.1:29500", "connection's end"},
		{"10.0.0.2:0", "10.0.0.1:29500", "no connection's end"},
		{"0.0.0.0:40000", "10.0.0.1:29500", "no connection's end"},
		{"[fe80::1%eth0]:40000", "[fe80::2]:29500", "zone"},
		{strings.Repeat("1", 65), "10.0.0.1:29500", "65 bytes"},
		{"10.0.0.2:40000", "", "connection's end"},
	} {
		a, b, err := ParseTCPEnds(tt.a, tt.b)
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%q %q: %v, want %q", tt.a, tt.b, err, tt.err)
		}
		if err == nil && (a.Addr().Is4In6() || b.Addr().Is4In6()) {
			t.Errorf("%q %q: %s %s, not unmapped", tt.a, tt.b, a, b)
		}
	}
}

func FuzzParseTCPEnds(f *testing.F) {
	f.Add("10.0.0.2:40000", "10.0.0.1:29500")
	f.Add("[fd00::2]:40000", "[::ffff:1.2.3.4]:1")
	f.Add("[fe80::1%eth0]:1", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		pa, pb, err := ParseTCPEnds(a, b)
		if err != nil {
			return
		}
		switch {
		case len(a) > maxEndLen || len(b) > maxEndLen:
			t.Fatal("an end past the bound parsed")
		case pa.Addr().Is4() != pb.Addr().Is4() || pa.Addr().Is4In6() || pb.Addr().Is4In6():
			t.Fatalf("%s %s", pa, pb)
		case pa.Port() == 0 || pb.Port() == 0 || pa.Addr().Zone() != "" || pb.Addr().Zone() != "":
			t.Fatalf("%s %s", pa, pb)
		}
	})
}
