package security_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/musterhq/muster/security"
)

// The owner of a local TCP connection's other end is the uid of the process
// that made it, whoever that is.
func TestTCPPeerOwner(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			host := map[string]string{"tcp4": "127.0.0.1", "tcp6": "::1"}[network]
			l, err := net.Listen(network, net.JoinHostPort(host, "0"))
			if err != nil {
				t.Skip(err)
			}
			defer l.Close()
			port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
			self, err := net.Dial(network, l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer self.Close()
			check(t, l, uint32(os.Geteuid()))
			if os.Geteuid() != 0 {
				return
			}
			// Another user's process, which holds its connection until it ends.
			cmd := exec.Command("bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port+"; read -t 20 <&3")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			check(t, l, 65534)
		})
	}
}

func check(t *testing.T, l net.Listener, want uint32) {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uid, found, err := security.TCPPeerOwner(c)
	if err != nil || !found || uid != want {
		t.Fatalf("owner of %s: uid %d, found %v, %v; want uid %d", c.RemoteAddr(), uid, found, err, want)
	}
	// As the agent of the peer's host looks it up: by the peer's own
	// address first, many lookups on one netlink socket.
	d, err := security.OpenSockDiag()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	peer, local := c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
	for range 3 {
		uid, found, err := d.Owner(peer, local)
		if err != nil || !found || uid != want {
			t.Fatalf("owner of the socket %s -> %s: uid %d, found %v, %v; want uid %d", peer, local, uid, found, err, want)
		}
		// This process's own end is found too, as this process's.
		if uid, found, err := d.Owner(local, peer); err != nil || !found || uid != uint32(os.Geteuid()) {
			t.Fatalf("owner of the socket %s -> %s: uid %d, found %v, %v", local, peer, uid, found, err)
		}
		// A port no socket has is no one's.
		if _, found, err := d.Owner(netip.AddrPortFrom(peer.Addr(), 1), local); err != nil || found {
			t.Fatalf("a socket that is not there: found %v, %v", found, err)
		}
	}
}
