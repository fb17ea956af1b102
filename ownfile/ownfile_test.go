package ownfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostile is another local user's uid, who plants things for root to trip on.
const hostile = 65533

// shared is a directory every user may write to, as /tmp: root's and sticky.
func shared(t *testing.T) string {
	d := t.TempDir()
	if err := os.Chmod(d, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the other user's files are made as another uid")
	}
}

// plant makes what fn makes at path, then gives it to the hostile user.
func plant(t *testing.T, path string, fn func(string) error) {
	t.Helper()
	if err := fn(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, hostile, hostile); err != nil {
		t.Fatal(err)
	}
}

// openSoon runs open and fails the test if it is still blocked after a bound:
// a FIFO nobody writes to would keep it there for ever.
func openSoon(t *testing.T, open func() (*os.File, error)) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := open()
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("open blocked")
		return nil
	}
}

func TestOpenAppendTakesOnlyTheUsersRegularFile(t *testing.T) {
	needRoot(t)
	dir := shared(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(path string) // plants at path
		want  string            // "" when the open succeeds
	}{
		{"nothing there", func(string) {}, ""},
		{"own file", func(p string) { os.WriteFile(p, nil, 0o644) }, ""},
		{"FIFO of another user", func(p string) { plant(t, p, func(p string) error { return syscall.Mkfifo(p, 0o666) }) }, "is a FIFO, not a regular file"},
		{"own FIFO", func(p string) { syscall.Mkfifo(p, 0o600) }, "is a FIFO, not a regular file"},
		{"link of another user", func(p string) { plant(t, p, func(p string) error { return os.Symlink(secret, p) }) }, "is a symbolic link"},
		{"file of another user", func(p string) { plant(t, p, func(p string) error { return os.WriteFile(p, nil, 0o666) }) }, "belongs to uid 65533, not uid 0"},
		{"hard link to root's file", func(p string) { os.Link(secret, p) }, "has 2 names"},
		{"directory", func(p string) { os.Mkdir(p, 0o755) }, "is a directory, not a regular file"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.Repeat("f", i+1))
			tt.setup(path)
			err := openSoon(t, func() (*os.File, error) { return OpenAppend(path, 0o644, 0) })
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, path, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "root's\n" {
		t.Fatalf("root's file was written through a name another user made: %q", b)
	}
}

func TestMkdirAllLeadsNowhereAnotherUserChose(t *testing.T) {
	needRoot(t)
	elsewhere := shared(t) // where the hostile user wants root's files
	theirs := filepath.Join(elsewhere, "theirs")
	plant(t, theirs, func(p string) error { return os.Mkdir(p, 0o777) })
	tests := []struct {
		name string
		// setup returns the --log-dir to make, under the shared directory d.
		setup func(d string) string
		want  string // "" when it is made
	}{
		{"new, in a shared directory", func(d string) string { return filepath.Join(d, "logs", "j-1") }, ""},
		{"own link", func(d string) string {
			own := t.TempDir()
			os.Symlink(own, filepath.Join(d, "mine"))
			return filepath.Join(d, "mine", "j-1")
		}, ""},
		{"another user's link as the directory", func(d string) string {
			plant(t, filepath.Join(d, "logs"), func(p string) error { return os.Symlink(theirs, p) })
			return filepath.Join(d, "logs")
		}, "is a symbolic link of uid 65533, not uid 0 or root"},
		{"another user's link on the way", func(d string) string {
			plant(t, filepath.Join(d, "logs"), func(p string) error { return os.Symlink(theirs, p) })
			return filepath.Join(d, "logs", "j-1")
		}, "is a symbolic link of uid 65533, not uid 0 or root"},
		{"another user's directory on the way", func(d string) string {
			return filepath.Join(theirs, "j-1")
		}, "belongs to uid 65533, not uid 0 or root"},
		{"another user's directory", func(d string) string { return theirs }, "belongs to uid 65533, not uid 0 or root"},
		{"a directory all may write to", func(d string) string {
			open := filepath.Join(d, "open")
			os.Mkdir(open, 0o777)
			os.Chmod(open, 0o777)
			return filepath.Join(open, "j-1")
		}, "other users may write to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.setup(shared(t))
			err := MkdirAll(dir, 0o755, 0)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
					t.Fatalf("%s not made: %v", dir, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
	if entries, _ := os.ReadDir(theirs); len(entries) != 0 {
		t.Fatalf("root made %v in the other user's directory", entries)
	}
}
