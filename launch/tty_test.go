package launch

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/supervise"
)

// terminal is a pseudo-terminal's slave of cols columns, a launcher's
// stdout or stderr on a terminal.
func terminal(t *testing.T, cols uint16) *os.File {
	t.Helper()
	master, slave, err := supervise.OpenTerminal(30, cols, -1)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { slave.Close(); master.Close() })
	return slave
}

func TestTerminalChoice(t *testing.T) {
	on, off := true, false
	tty, errTTY := terminal(t, 100), terminal(t, 100)
	var pipe bytes.Buffer
	type want struct {
		tty    bool
		stderr bool
		cols   uint32
		ranks  int
		note   bool
	}
	tests := []struct {
		name string
		req  TerminalRequest
		want want
	}{
		{"default: one rank on the embedded default", TerminalRequest{Stdout: tty, Stderr: errTTY, Embedded: true, World: 1, Tag: true},
			want{tty: true, stderr: true, cols: uint32(100 - len("[0] "))}},
		{"default: one printed rank of four", TerminalRequest{Stdout: tty, Stderr: &pipe, Embedded: true, World: 4, OutputRanks: [][2]int32{{2, 2}, {2, 2}, {7, 9}}, Tag: true},
			want{tty: true, cols: uint32(100 - len("[2] ")), ranks: 3}},
		{"default: two ranks printed", TerminalRequest{Stdout: tty, Stderr: errTTY, Embedded: true, World: 2}, want{}},
		{"default: --log-dir", TerminalRequest{Stdout: tty, Stderr: errTTY, Embedded: true, World: 1, LogDir: true}, want{}},
		{"default: a cluster", TerminalRequest{Stdout: tty, Stderr: errTTY, World: 1}, want{}},
		{"default: stdout a pipe", TerminalRequest{Stdout: &pipe, Stderr: errTTY, Embedded: true, World: 1}, want{}},
		{"--tty: many ranks, a cluster, timestamps", TerminalRequest{Asked: &on, Stdout: tty, Stderr: errTTY, World: 16, LogDir: true, Tag: true, Timestamp: true},
			want{tty: true, stderr: true, cols: uint32(100 - timestampWidth - len("[15] "))}},
		{"--tty, untagged", TerminalRequest{Asked: &on, Stdout: tty, Stderr: errTTY, World: 16}, want{tty: true, stderr: true, cols: 100}},
		{"--tty: stdout a pipe", TerminalRequest{Asked: &on, Stdout: &pipe, Stderr: errTTY, Embedded: true, World: 1}, want{note: true}},
		{"--no-tty", TerminalRequest{Asked: &off, Stdout: tty, Stderr: errTTY, Embedded: true, World: 1}, want{}},
	}
	for _, tt := range tests {
		tt.req.Term = "xterm-256color"
		got, note := Terminal(tt.req)
		if (got != nil) != tt.want.tty || (note != "") != tt.want.note {
			t.Errorf("%s: terminal %v, note %q; want terminal %v, a note %v", tt.name, got, note, tt.want.tty, tt.want.note)
			continue
		}
		if got == nil {
			continue
		}
		if !got.Stdout || got.Stderr != tt.want.stderr || got.Rows != 30 || got.Cols != tt.want.cols || len(got.Ranks) != tt.want.ranks || got.Term != "xterm-256color" {
			t.Errorf("%s: %v, want stderr %v, 30 rows, %d columns, %d rank ranges", tt.name, got, tt.want.stderr, tt.want.cols, tt.want.ranks)
		}
	}
	// A TERM that is no terminal type's name is not sent.
	if got, _ := Terminal(TerminalRequest{Asked: &on, Stdout: tty, World: 1, Term: "x=y\n"}); got == nil || got.Term != "" {
		t.Errorf("TERM x=y\\n: %v", got)
	}
	// A terminal that does not know its size sends none.
	ws := &unix.Winsize{}
	unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, ws)
	if got, _ := Terminal(TerminalRequest{Asked: &on, Stdout: tty, World: 1, Tag: true}); got == nil || got.Rows != 0 || got.Cols != 0 {
		t.Errorf("no size: %v", got)
	}
}

func TestPrintedRanks(t *testing.T) {
	for _, tt := range []struct {
		world int64
		spans [][2]int32
		want  int64
	}{
		{4, nil, 4},
		{4, [][2]int32{{0, 0}}, 1},
		{4, [][2]int32{{3, 9}}, 1},
		{4, [][2]int32{{1, 2}, {0, 1}, {2, 2}}, 3},
		{4, [][2]int32{{5, 9}}, 0},
	} {
		if got := printedRanks(tt.world, tt.spans); got != tt.want {
			t.Errorf("printedRanks(%d, %v) = %d, want %d", tt.world, tt.spans, got, tt.want)
		}
	}
}
