// Package paths is where muster keeps its files by default, in one place:
// the runtime directory (sockets, job directories), the state directory
// (job history, kept output) and the configuration directory (the cluster
// token), for root and for other users, under systemd or not. A variable
// that names a relative path is ignored, as the XDG specification says.
package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// User is whose directories they are: the process's own (OS), or any in
// tests.
type User struct {
	Getenv func(string) string
	UID    int
}

// OS is this process's user, with its environment.
func OS() User { return User{Getenv: os.Getenv, UID: os.Geteuid()} }

// fallback is a user's own directory under /tmp when nothing better is
// known: /tmp/muster-UID.
func (u User) fallback() string { return filepath.Join("/tmp", fmt.Sprintf("muster-%d", u.UID)) }

// absolute is v when it is an absolute path, else "".
func absolute(v string) string {
	if filepath.IsAbs(v) {
		return v
	}
	return ""
}

// systemd is the first directory systemd gave the unit in variable name
// (RUNTIME_DIRECTORY, STATE_DIRECTORY), when it gave one.
func (u User) systemd(name string) string {
	d, _, _ := strings.Cut(u.Getenv(name), ":")
	return absolute(d)
}

// UserRuntimeDir is this user's runtime directory for muster, where
// launchers look for their agent's socket: /run/muster for root, else
// $XDG_RUNTIME_DIR/muster, else /tmp/muster-UID.
func (u User) UserRuntimeDir() string {
	switch {
	case u.UID == 0:
		return "/run/muster"
	case absolute(u.Getenv("XDG_RUNTIME_DIR")) != "":
		return filepath.Join(u.Getenv("XDG_RUNTIME_DIR"), "muster")
	}
	return u.fallback()
}

// RuntimeDir is where a running agent keeps what lasts as long as it does:
// systemd's RuntimeDirectory when the unit has one, else UserRuntimeDir.
func (u User) RuntimeDir() string {
	if d := u.systemd("RUNTIME_DIRECTORY"); d != "" {
		return d
	}
	return u.UserRuntimeDir()
}

// StateDir is where what outlives the agent is kept: systemd's
// StateDirectory, else /var/lib/muster for root, else
// $XDG_STATE_HOME/muster, else ~/.local/state/muster, else /tmp/muster-UID.
func (u User) StateDir() string {
	if d := u.systemd("STATE_DIRECTORY"); d != "" {
		return d
	}
	if u.UID == 0 {
		return "/var/lib/muster"
	}
	if d := absolute(u.Getenv("XDG_STATE_HOME")); d != "" {
		return filepath.Join(d, "muster")
	}
	if home := absolute(u.Getenv("HOME")); home != "" {
		return filepath.Join(home, ".local", "state", "muster")
	}
	return u.fallback()
}

// ConfigDir is where the cluster token is kept: /etc/muster for root,
// else $XDG_CONFIG_HOME/muster, else ~/.config/muster; "" when no home is
// known.
func (u User) ConfigDir() string {
	if u.UID == 0 {
		return "/etc/muster"
	}
	if d := absolute(u.Getenv("XDG_CONFIG_HOME")); d != "" {
		return filepath.Join(d, "muster")
	}
	if home := absolute(u.Getenv("HOME")); home != "" {
		return filepath.Join(home, ".config", "muster")
	}
	return ""
}
