package supervise

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openTerminal(t *testing.T, rows, cols uint16) (master, slave *os.File) {
	t.Helper()
	master, slave, err := OpenTerminal(rows, cols, -1)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	return master, slave
}

// A terminal's slave is a raw terminal of the size asked; what is written
// there is read from the master as written: no \r before \n, a progress
// bar's pieces as they are drawn (read deadlines work on the master), and
// the last line without its newline when the slave closes (EIO, the
// master's end, is no error).
func TestTerminalReader(t *testing.T) {
	t.Parallel()
	master, slave := openTerminal(t, 40, 132)
	ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row != 40 || ws.Col != 132 {
		t.Fatalf("window size %+v %v, want 40x132", ws, err)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil || tio.Oflag&unix.OPOST != 0 || tio.Lflag&unix.ECHO != 0 {
		t.Fatalf("termios %+v %v: want raw", tio, err)
	}
	go func() {
		for _, s := range []string{"a\n\x1b[32mgreen\x1b[0m\n", "\r10%", "\r50%", "\rlast"} {
			slave.WriteString(s)
			time.Sleep(3 * PauseFlush / 2)
		}
		slave.Close()
	}()
	var got []chunk
	if err := NewTerminalReader(master).Read(func(d []byte, p bool) { got = append(got, chunk{string(d), p}) }); err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := []chunk{{"a\n\x1b[32mgreen\x1b[0m\n", false}, {"\r10%", true}, {"\r50%", true}, {"\rlast", true}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range got {
		// The last piece may come with the terminal's end, unpaused, when
		// a loaded machine runs the reader late: its bytes are what count.
		if last := i == len(got)-1; got[i] != want[i] && !(last && got[i].data == want[i].data) {
			t.Fatalf("chunk %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A last line the worker leaves as it exits is read before the end.
func TestTerminalLastLine(t *testing.T) {
	t.Parallel()
	master, slave := openTerminal(t, 0, 0)
	slave.WriteString("done\nno newline")
	slave.Close()
	var all string
	if err := NewTerminalReader(master).Read(func(d []byte, _ bool) { all += string(d) }); err != nil || all != "done\nno newline" {
		t.Fatalf("read %q, %v", all, err)
	}
}

// Cut ends the read of a terminal whose slave a process still holds.
func TestTerminalCut(t *testing.T) {
	t.Parallel()
	master, slave := openTerminal(t, 0, 0)
	defer slave.Close()
	slave.WriteString("last words\n")
	rd := NewTerminalReader(master)
	done := make(chan error, 1)
	got := make(chan string, 4)
	go func() { done <- rd.Read(func(d []byte, _ bool) { got <- string(d) }) }()
	select {
	case s := <-got:
		if s != "last words\n" {
			t.Fatalf("read %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the written line was not read")
	}
	rd.Cut() // while Read waits for more
	select {
	case err := <-done:
		if err != ErrCut {
			t.Fatalf("err %v, want ErrCut", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Cut did not end Read")
	}
}
