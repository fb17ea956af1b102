package agent

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/musterhq/muster/supervise"
)

func TestStartErrorNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("nope.sh", "#!/usr/bin/nope\necho hi\n", 0o755)
	write("spaced.sh", "#! /usr/bin/nope -x\necho hi\n", 0o755)
	write("dos.sh", "#!/bin/sh\r\necho hi\r\n", 0o755)
	write("empty.sh", "#!\n", 0o755)
	write("ok.sh", "#!/bin/sh\necho hi\n", 0o755)
	write("data", "just data\n", 0o755)
	write("private.sh", "#!/bin/sh\n", 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Mkdir(filepath.Join(dir, "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "bin", "tool"), []byte("#!/usr/bin/nope\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		argv string
		env  []string
		code int
		want string // the whole message; "" when the worker starts
	}{
		{"missing interpreter", "./nope.sh", nil, 127, "cannot start ./nope.sh: its interpreter /usr/bin/nope (from its #! line) does not exist"},
		{"space after #!", "./spaced.sh", nil, 127, "cannot start ./spaced.sh: its interpreter /usr/bin/nope (from its #! line) does not exist"},
		{"DOS line endings", "./dos.sh", nil, 127, `cannot start ./dos.sh: its interpreter "/bin/sh\r" (from its #! line) does not exist (the line ends in \r: the script has DOS line endings)`},
		{"a script found in PATH", "tool", []string{"PATH=" + filepath.Join(dir, "bin")}, 127, "cannot start tool: its interpreter /usr/bin/nope (from its #! line) does not exist"},
		{"missing file", "./missing.sh", nil, 127, "cannot start ./missing.sh: no such file"},
		{"not in PATH", "surely-no-such-program", []string{"PATH=" + dir}, 127, "cannot start surely-no-such-program: no such program in PATH"},
		{"not a program", "./data", nil, 126, "cannot start ./data: not a program this machine runs, nor a script with a #! line"},
		{"not executable", "./private.sh", nil, 126, "cannot start ./private.sh: permission denied: not an executable file"},
		{"relative to the working directory", "./ok.sh", nil, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := append([]string{"PATH=/usr/bin:/bin"}, tt.env...)
			st := tryStart(t, workerSpec{argv: []string{tt.argv}, env: env, dir: dir})
			if tt.want == "" {
				if st.failed() {
					t.Fatalf("did not start: %+v", st)
				}
				return
			}
			if st.code != tt.code || st.err != tt.want {
				t.Fatalf("code %d, %q\nwant %d, %q", st.code, st.err, tt.code, tt.want)
			}
		})
	}
}

func TestStartErrorIsValidText(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "caf\xe9")
	st := tryStart(t, workerSpec{argv: []string{name}})
	if st.code != 127 || !strings.Contains(st.err, `caf\xe9`) || strings.ToValidUTF8(st.err, "?") != st.err {
		t.Fatalf("%+v: want exit 127 and a valid UTF-8 message quoting the name", st)
	}
}

func TestCheckWorkdir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	odd := filepath.Join(dir, "caf\xe9")
	os.Mkdir(odd, 0o755)
	tests := []struct {
		dir, want string
	}{
		{"", ""},
		{dir, ""},
		{odd, ""},
		{file, "working directory " + file + " is not a directory"},
		{filepath.Join(dir, "missing"), "working directory " + filepath.Join(dir, "missing") + " does not exist"},
		{odd + "x", `working directory "` + dir + `/caf\xe9x" does not exist`},
	}
	for _, tt := range tests {
		err := checkWorkdir(tt.dir)
		if (tt.want == "") != (err == nil) || err != nil && err.Error() != tt.want {
			t.Errorf("checkWorkdir(%q) = %v, want %q", tt.dir, err, tt.want)
		}
	}
}

// tryStart starts one worker as a job's supervisor does and returns how it
// ended.
func tryStart(t *testing.T, ws workerSpec) exitStatus {
	t.Helper()
	path, err := lookPath(ws.argv[0], ws.dir, ws.env)
	if err != nil {
		return startError(ws.argv[0], "", err)
	}
	g, err := supervise.Start(supervise.Spec{Workers: []supervise.Worker{{Path: path, Argv: ws.argv, Env: ws.env, Dir: ws.dir, Cred: ws.cred}}})
	if err != nil {
		t.Fatal(err)
	}
	var st exitStatus
	for ev := range g.Events() {
		switch ev.Kind {
		case supervise.StartFailed:
			st = execError(ws.argv[0], path, ws.dir, ev.Err)
		case supervise.Exited:
			st = exitStatus{code: ev.Code, signal: ev.Signal}
		}
	}
	return st
}

// A working directory the job's user may not enter is named, not blamed on
// the program: the agent, as root, sees it exist.
func TestStartErrorNamesARefusedWorkdir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a worker as another user")
	}
	dir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st := tryStart(t, workerSpec{argv: []string{"true"}, env: []string{"PATH=/usr/bin:/bin"}, dir: dir,
		cred: &syscall.Credential{Uid: 65534, Gid: 65534}})
	want := "cannot start true: permission denied, to enter its working directory " + dir + " as the job's user or to run it"
	if st.code != 126 || st.err != want {
		t.Fatalf("code %d, %q\nwant 126, %q", st.code, st.err, want)
	}
}
