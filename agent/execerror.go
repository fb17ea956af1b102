package agent

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// lookPath finds the program a worker runs as its shell would from the
// worker's working directory: a name with a slash is a path (relative to
// dir), any other name is looked up in the worker's own PATH (from env, or
// the agent's when env has none).
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if dir != "" && !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if _, err := exec.LookPath(p); err != nil {
			return "", &exec.Error{Name: name, Err: unwrapExecError(err)}
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(searchPath(env)) {
		if d == "" {
			d = "."
		}
		if dir != "" && !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if !strings.Contains(p, "/") {
			p = "./" + p
		}
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// searchPath is the PATH a worker's program is looked up in: the last one
// in env, as exec passes it, or the agent's when env has none.
func searchPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if path, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return path
		}
	}
	return os.Getenv("PATH")
}

func unwrapExecError(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// startError says why a worker could not start, once and plainly, with the
// shell's exit code: 127 for something missing, 126 for something that
// cannot run. A script whose #! line names a missing program, or a binary
// whose ELF interpreter is missing, fails with ENOENT as if it were missing
// itself: the message names what is really missing.
func startError(argv0, dir string, err error) exitStatus {
	code, why := 126, ""
	var ee *exec.Error
	var pe *fs.PathError
	switch {
	case errors.As(err, &ee):
		switch {
		case errors.Is(ee.Err, exec.ErrNotFound):
			code, why = 127, "no such program in PATH"
		case errors.Is(ee.Err, fs.ErrNotExist):
			code, why = 127, "no such file"
		case errors.Is(ee.Err, fs.ErrPermission):
			why = "permission denied: not an executable file"
		default:
			why = ee.Err.Error()
		}
	case errors.As(err, &pe) && pe.Op == "fork/exec":
		switch {
		case errors.Is(pe.Err, syscall.ENOENT):
			code, why = 127, "no such file"
			if m := missingInterpreter(pe.Path); m != "" {
				why = m
			}
		case errors.Is(pe.Err, syscall.EACCES):
			why = deniedWhy(pe.Path, dir)
		case errors.Is(pe.Err, syscall.ENOEXEC):
			why = "not a program this machine runs, nor a script with a #! line"
		default:
			why = pe.Err.Error()
		}
	default:
		if errors.Is(err, fs.ErrNotExist) {
			code = 127
		}
		why = err.Error()
	}
	return exitStatus{code: code, err: validText(fmt.Sprintf("cannot start %s: %s", showPath(argv0), why))}
}

// deniedWhy says what a refused exec of path was refused: the file, when no
// one may execute it, else entering dir too, which the kernel refuses alike.
func deniedWhy(path, dir string) string {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 == 0 {
		return "permission denied: not an executable file"
	}
	if dir != "" {
		return fmt.Sprintf("permission denied, to enter its working directory %s as the job's user or to run it", showPath(dir))
	}
	return "permission denied"
}

// missingInterpreter names the missing interpreter of the program at path,
// when that is why it could not be run, or returns "".
func missingInterpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if interp, ok := bytes.CutPrefix(head, []byte("#!")); ok {
		line, _, _ := bytes.Cut(interp, []byte("\n"))
		line = bytes.TrimLeft(line, " \t")
		if i := bytes.IndexAny(line, " \t"); i >= 0 {
			line = line[:i]
		}
		name := string(line)
		if name == "" {
			return "its #! line names no interpreter"
		}
		if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			return ""
		}
		msg := fmt.Sprintf("its interpreter %s (from its #! line) does not exist", showPath(name))
		if strings.HasSuffix(name, "\r") {
			msg += " (the line ends in \\r: the script has DOS line endings)"
		}
		return msg
	}
	if !bytes.HasPrefix(head, []byte(elf.ELFMAG)) {
		return ""
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return ""
		}
		name := string(bytes.TrimRight(b, "\x00"))
		if _, err := os.Stat(name); errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("its ELF interpreter %s does not exist (a program built for another system?)", showPath(name))
		}
	}
	return ""
}

// showPath writes a path as it is when that is unambiguous, quoted when it
// holds spaces, control characters or bytes that are not UTF-8.
func showPath(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// validText makes s valid UTF-8, as protobuf strings must be: any byte that
// is not becomes U+FFFD.
func validText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// checkWorkdir says what is wrong with a job's working directory on this
// node, if anything (the failure names the node). A path is quoted when it
// must be: it may be any bytes.
func checkWorkdir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("working directory %s does not exist", showPath(dir))
	case err != nil:
		return fmt.Errorf("working directory %s: %v", showPath(dir), errors.Unwrap(err))
	case !fi.IsDir():
		return fmt.Errorf("working directory %s is not a directory", showPath(dir))
	}
	return nil
}
