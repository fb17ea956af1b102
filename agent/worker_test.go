package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestProgramPath(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644)
	env := []string{"PATH=/nonexistent:" + dir}
	tests := []struct{ argv0, want string }{
		{"prog", prog},
		{"./prog", "./prog"},
		{"/abs/x", "/abs/x"},
		{"plain", ""}, // not executable
		{"missing", ""},
	}
	for _, tt := range tests {
		if got := programPath(tt.argv0, env); got != tt.want {
			t.Errorf("programPath(%q) = %q, want %q", tt.argv0, got, tt.want)
		}
	}
}

func TestStartErrorCodes(t *testing.T) {
	if st := startError("x", syscall.ENOENT); st.code != 127 {
		t.Errorf("missing program: %+v", st)
	}
	if st := startError("x", syscall.EACCES); st.code != 126 {
		t.Errorf("not a program: %+v", st)
	}
}
