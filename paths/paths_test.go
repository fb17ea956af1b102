package paths

import "testing"

func TestDirs(t *testing.T) {
	tmp := "/tmp/muster-1000"
	for _, tt := range []struct {
		name                           string
		uid                            int
		env                            map[string]string
		runtime, userRuntime, state, c string
	}{
		{"nothing set", 1000, nil, tmp, tmp, tmp, ""},
		{"XDG", 1000, map[string]string{"XDG_RUNTIME_DIR": "/run/user/7", "XDG_STATE_HOME": "/s", "XDG_CONFIG_HOME": "/c", "HOME": "/h"},
			"/run/user/7/muster", "/run/user/7/muster", "/s/muster", "/c/muster"},
		{"relative XDG is ignored", 1000, map[string]string{"XDG_RUNTIME_DIR": "run", "XDG_STATE_HOME": "s", "XDG_CONFIG_HOME": "c", "HOME": "/h"},
			tmp, tmp, "/h/.local/state/muster", "/h/.config/muster"},
		{"systemd's directories", 1000, map[string]string{"RUNTIME_DIRECTORY": "/run/muster:/run/other", "STATE_DIRECTORY": "/var/lib/muster", "XDG_RUNTIME_DIR": "/run/user/7"},
			"/run/muster", "/run/user/7/muster", "/var/lib/muster", ""},
		{"root", 0, map[string]string{"XDG_RUNTIME_DIR": "/run/user/0", "HOME": "/root"},
			"/run/muster", "/run/muster", "/var/lib/muster", "/etc/muster"},
		{"root under systemd", 0, map[string]string{"RUNTIME_DIRECTORY": "/run/m2", "STATE_DIRECTORY": "/var/lib/m2"},
			"/run/m2", "/run/muster", "/var/lib/m2", "/etc/muster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := User{Getenv: func(k string) string { return tt.env[k] }, UID: tt.uid}
			if got := u.RuntimeDir(); got != tt.runtime {
				t.Errorf("RuntimeDir = %q, want %q", got, tt.runtime)
			}
			if got := u.UserRuntimeDir(); got != tt.userRuntime {
				t.Errorf("UserRuntimeDir = %q, want %q", got, tt.userRuntime)
			}
			if got := u.StateDir(); got != tt.state {
				t.Errorf("StateDir = %q, want %q", got, tt.state)
			}
			if got := u.ConfigDir(); got != tt.c {
				t.Errorf("ConfigDir = %q, want %q", got, tt.c)
			}
		})
	}
}
