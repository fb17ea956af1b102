package e2e

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openTerminal opens a pseudo-terminal of 30 rows by 100 columns, raw (no
// \r added to a \n): its master, and its slave for the launcher.
func openTerminal(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 100}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// runOnTerminal runs the launcher with its stdout on a terminal, and its
// stderr too when both is set; it returns what the terminal got, and the
// launcher's stderr otherwise.
func runOnTerminal(t *testing.T, both bool, args ...string) (term string, r result) {
	t.Helper()
	master, slave := openTerminal(t)
	cmd := exec.Command(launcherBin, args...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = slave, &errb
	if both {
		cmd.Stderr = slave
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	slave.Close()
	// The master reads until every holder of the slave has closed it (EIO).
	var got bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&got, master); close(copied) }()
	r = wait(t, cmd, &out, &errb)
	<-copied
	return got.String(), r
}

// launcher run --tty on a terminal: the printed rank's stdout is a
// terminal of the launcher's size less its tag, with the launcher's TERM;
// its output arrives tagged, a colour and a last line without its newline
// as written, and its --log-dir file gets the bytes it wrote. A rank not
// printed keeps a pipe.
func TestTtyOutputTaggedAndLogged(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	term, r := runOnTerminal(t, false, "run", "--embedded", "--tty", "--nproc", "2", "--output-ranks", "1", "--log-dir", logs, "--",
		"sh", "-c", `if test -t 1; then printf 'tty '; stty size <&1; echo "$TERM"; else echo pipe; fi; printf '\033[32mgreen\033[0m\n'; printf end`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := "[1] tty 30 96\n[1] xterm-256color\n[1] \x1b[32mgreen\x1b[0m\n[1] end\n"; term != want {
		t.Errorf("terminal got %q, want %q", term, want)
	}
	for rank, want := range []string{"pipe\n\x1b[32mgreen\x1b[0m\nend", "tty 30 96\nxterm-256color\n\x1b[32mgreen\x1b[0m\nend"} {
		files, _ := filepath.Glob(filepath.Join(logs, "*", "rank-"+strconv.Itoa(rank)+".log"))
		if len(files) != 1 {
			t.Fatalf("rank %d: log files %v", rank, files)
		}
		if b, err := os.ReadFile(files[0]); err != nil || string(b) != want {
			t.Errorf("%s: %q (%v), want %q", files[0], b, err, want)
		}
	}
}

// The default: one rank on the embedded default on a terminal gets a
// terminal, for stderr too when the launcher's stderr is one; --no-tty, or
// a stdout that is no terminal, keeps pipes; --tty then says why it did
// nothing, and the job runs.
func TestTtyDefault(t *testing.T) {
	t.Parallel()
	const script = `test -t 1 && echo out:tty || echo out:pipe; test -t 2 && echo err:tty >&2 || echo err:pipe >&2`
	term, r := runOnTerminal(t, true, "run", "--embedded", "--", "sh", "-c", script)
	if r.code != 0 || !strings.Contains(term, "[0] out:tty\n") || !strings.Contains(term, "[0] err:tty\n") {
		t.Errorf("default on a terminal: exit %d, terminal %q", r.code, term)
	}
	term, r = runOnTerminal(t, false, "run", "--embedded", "--", "sh", "-c", script)
	if r.code != 0 || term != "[0] out:tty\n" || r.stderr != "[0] err:pipe\n" {
		t.Errorf("default, stderr a pipe: exit %d, terminal %q, stderr %q", r.code, term, r.stderr)
	}
	term, r = runOnTerminal(t, true, "run", "--embedded", "--no-tty", "--", "sh", "-c", script)
	if r.code != 0 || !strings.Contains(term, "[0] out:pipe\n") || !strings.Contains(term, "[0] err:pipe\n") {
		t.Errorf("--no-tty: exit %d, terminal %q", r.code, term)
	}
	term, r = runOnTerminal(t, true, "run", "--embedded", "--nproc", "2", "--", "sh", "-c", script)
	if r.code != 0 || strings.Contains(term, "tty") {
		t.Errorf("default, two ranks: exit %d, terminal %q", r.code, term)
	}
	r = runLauncher(t, "run", "--embedded", "--tty", "--", "sh", "-c", script)
	if r.code != 0 || r.stdout != "[0] out:pipe\n" || !strings.Contains(r.stderr, "--tty: stdout is not a terminal") {
		t.Errorf("--tty into a pipe: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
