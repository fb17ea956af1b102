package security

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/musterhq/muster/paths"
)

// SystemSocket is the Unix socket of an agent running as root: every local
// user may connect, and a job runs as the user who submitted it.
const SystemSocket = "/run/muster/agent.sock"

// ErrSocketInUse says another process already serves a socket path.
var ErrSocketInUse = errors.New("another process serves this socket")

// maxSocketPath is what fits in sockaddr_un.sun_path with its NUL.
const maxSocketPath = 107

// DefaultSocket is where an agent hosting a store serves its Unix socket by
// default: SystemSocket for root, else $XDG_RUNTIME_DIR/muster/agent.sock
// (or /tmp/muster-UID/agent.sock without XDG_RUNTIME_DIR).
func DefaultSocket() string { return filepath.Join(paths.OS().UserRuntimeDir(), "agent.sock") }

// SocketAddr is the dial address of a socket path: unix:///path.
func SocketAddr(path string) string { return "unix://" + path }

// NormalizeAddr turns a --cluster value into a dial address: an absolute
// path or unix:/path becomes unix:///path; HOST:PORT stays as it is.
// CheckAddr says what is wrong with a store address, if anything: it is
// HOST:PORT with a port number, or unix:///ABSOLUTE/PATH.
func CheckAddr(addr string) error {
	if IsUnixAddr(addr) {
		if p := strings.TrimPrefix(addr, "unix://"); !strings.HasPrefix(p, "/") {
			return fmt.Errorf("%q: a socket is unix:///ABSOLUTE/PATH", addr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%q: want HOST:PORT (or unix:///PATH of an agent's socket)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number in 1..65535", addr, port)
	}
	return nil
}

func NormalizeAddr(addr string) string {
	switch {
	case strings.HasPrefix(addr, "/"):
		return SocketAddr(filepath.Clean(addr))
	case strings.HasPrefix(addr, "unix:") && !strings.HasPrefix(addr, "unix://"):
		return SocketAddr(filepath.Clean(strings.TrimPrefix(addr, "unix:")))
	}
	return addr
}

// FindLocalAgent returns the dial address of an agent serving a store on
// this machine: this user's own agent (DefaultSocket), then the system's
// (SystemSocket). It returns "" when no socket there answers. A socket
// served by anyone but root or this user is passed over: a job is never
// handed to another user's process posing as an agent.
func FindLocalAgent() string {
	for _, p := range LocalAgentSockets() {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if trustedSocket(p) {
			return SocketAddr(p)
		}
	}
	return ""
}

// LocalAgentSockets are the sockets FindLocalAgent looks at, in order:
// $MUSTER_SOCKET alone when set, the variable that also picks the agent's
// own --socket, so a launcher and an agent given one path find each other.
func LocalAgentSockets() []string {
	if p := os.Getenv("MUSTER_SOCKET"); p != "" {
		return []string{p}
	}
	if DefaultSocket() == SystemSocket {
		return []string{SystemSocket}
	}
	return []string{DefaultSocket(), SystemSocket}
}

// trustedSocket reports whether a process of root or this user serves path.
func trustedSocket(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	server, err := ReadPeerCred(c.(*net.UnixConn))
	return err == nil && (server.UID == 0 || int(server.UID) == os.Geteuid())
}

// ListenUnix serves path in a directory that only this user can change.
// shared lets every local user connect (mode 0666), else only this user
// (0600); the peer-credential check decides either way.
func ListenUnix(path string, shared bool) (*net.UnixListener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("socket %s: path is %d bytes, more than %d", path, len(path), maxSocketPath)
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("socket %s: want an absolute path", path)
	}
	dir := filepath.Dir(path)
	dirMode := os.FileMode(0o700)
	if shared {
		dirMode = 0o755
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := checkSocketDir(dir); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: the path exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: %w", path, ErrSocketInUse)
		}
		os.Remove(path) // left behind by a process that died
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if shared {
		mode = 0o666
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// checkSocketDir refuses a directory where someone else could replace the
// socket: it must be a real directory owned by this user (or root) and
// writable by nobody else.
func checkSocketDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s is not a directory", dir)
	case !ok || (int(st.Uid) != os.Geteuid() && st.Uid != 0):
		return fmt.Errorf("socket directory %s belongs to another user", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("socket directory %s is writable by other users (mode %o); use a directory only you can change", dir, fi.Mode().Perm())
	}
	return nil
}
