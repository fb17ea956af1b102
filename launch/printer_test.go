package launch

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

const so, se = musterv1.Stream_STREAM_STDOUT, musterv1.Stream_STREAM_STDERR

func out(rank int32, stream musterv1.Stream, data string) *musterv1.Output {
	return &musterv1.Output{Rank: rank, Stream: stream, Data: []byte(data)}
}

func paused(rank int32, data string) *musterv1.Output {
	return &musterv1.Output{Rank: rank, Stream: so, Data: []byte(data), Paused: true}
}

func TestPrinter(t *testing.T) {
	tests := []struct {
		name             string
		tag              bool
		events           []*musterv1.Output
		wantOut, wantErr string
	}{
		{"tagged", true, []*musterv1.Output{out(0, so, "a\n"), out(12, se, "b\n")}, "[0] a\n", "[12] b\n"},
		{"every line of a chunk tagged", true, []*musterv1.Output{out(3, so, "a\nb\n\n")}, "[3] a\n[3] b\n[3] \n", ""},
		{"untagged", false, []*musterv1.Output{out(0, so, "a\n"), out(1, so, "\n")}, "a\n\n", ""},
		{"pieces of one rank join; others stay whole", true, []*musterv1.Output{
			out(0, so, "he"), out(1, so, "other\n"), out(0, so, "llo\n")},
			"[1] other\n[0] hello\n", ""},
		{"an unfinished piece is printed at close", true, []*musterv1.Output{out(3, se, "cut")}, "", "[3] cut\n"},
		// A progress bar shows as it is drawn, its tag before each drawing
		// and never before a \r itself.
		{"progress bar", true, []*musterv1.Output{paused(0, "\r10%"), paused(0, "\r50%"), out(0, so, "\r100%\n")},
			"\r[0] 10%\r[0] 50%\r[0] 100%\n", ""},
		{"redraws in a row tag once", true, []*musterv1.Output{out(0, so, "a\r\r10%\r\r\n")}, "[0] a\r\r[0] 10%\r\r\n", ""},
		{"another rank ends a shown bar", true, []*musterv1.Output{paused(0, "\r50%"), out(1, so, "x\n"), out(0, so, " done\n")},
			"\r[0] 50%\n[1] x\n[0]  done\n", ""},
		// Off a terminal, a line merely slow to finish stays whole.
		{"a slow line stays whole", true, []*musterv1.Output{paused(0, "12"), out(1, so, "x\n"), out(0, so, "34\n")},
			"[1] x\n[0] 1234\n", ""},
		{"crlf lines keep one tag", true, []*musterv1.Output{out(0, so, "a\r\nb\r\n")}, "[0] a\r\n[0] b\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o, e bytes.Buffer
			p := NewPrinter(&o, &e, tt.tag)
			for _, ev := range tt.events {
				p.Output(ev)
			}
			p.Close()
			if o.String() != tt.wantOut || e.String() != tt.wantErr {
				t.Fatalf("stdout %q stderr %q, want %q %q", o.String(), e.String(), tt.wantOut, tt.wantErr)
			}
		})
	}
}

// countingWriter records each Write, to check writes hold whole lines.
type countingWriter struct {
	bytes.Buffer
	writes []string
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return w.Buffer.Write(p)
}

func TestPrinterFlushesLargeOutputInWholeLines(t *testing.T) {
	var o countingWriter
	p := NewPrinter(&o, &o, true)
	line := strings.Repeat("x", 1000) + "\n"
	for i := 0; i < 200; i++ {
		p.Output(out(int32(i%3), so, line))
	}
	p.Close()
	if len(o.writes) < 2 {
		t.Fatalf("%d writes for 200 KB: the printer does not flush as it goes", len(o.writes))
	}
	for _, w := range o.writes {
		if w[len(w)-1] != '\n' {
			t.Fatal("a write ends mid-line")
		}
	}
}

func TestPrinterHoldsLongLinesBounded(t *testing.T) {
	var o bytes.Buffer
	p := NewPrinter(&o, &o, false)
	piece := strings.Repeat("y", 64<<10)
	for i := 0; i < 20; i++ {
		p.Output(out(0, so, piece))
	}
	p.Flush()
	if o.Len() == 0 {
		t.Fatal("1.25 MiB of one unfinished line held back entirely")
	}
	p.Close()
	if o.Len() != 20*len(piece)+1 {
		t.Fatalf("%d bytes, want %d", o.Len(), 20*len(piece)+1)
	}
}

func TestPrinterOnATerminalClearsAndRedraws(t *testing.T) {
	var o bytes.Buffer
	p := NewPrinter(&o, &o, true)
	p.streams[0].tty = true
	for _, ev := range []*musterv1.Output{paused(0, "loading 12"), out(1, so, "x\n"), out(0, so, "34\n")} {
		p.Output(ev)
	}
	p.Close()
	if want := "[0] loading 12\r\x1b[K[1] x\n[0] loading 1234\n"; o.String() != want {
		t.Fatalf("%q, want %q", o.String(), want)
	}
}

// progressBar is a tqdm-style drawing of step i of n: each drawing whole.
func progressBar(i, n int) string {
	done := 40 * i / n
	return fmt.Sprintf("\rtrain: %3d%%|%s%s| %d/%d", 100*i/n, strings.Repeat("#", done), strings.Repeat(" ", 40-done), i, n)
}

// Two ranks drawing progress bars on a terminal, their updates taking
// turns: each redraw sends only each line's latest state, so the bytes
// grow with the updates, not with their square.
func TestPrinterOnATerminalRedrawsOnlyTheLatestState(t *testing.T) {
	const ranks, updates = 2, 800
	var o countingWriter
	p := NewPrinter(&o, &o, true)
	p.streams[0].tty = true
	for i := 1; i <= updates; i++ {
		for r := int32(0); r < ranks; r++ {
			p.Output(paused(r, progressBar(i, updates)))
		}
	}
	for r := int32(0); r < ranks; r++ {
		p.Output(out(r, so, "\n"))
	}
	p.Close()
	// Each update: the clear of the other rank's line, the tag, the
	// drawing and its tag again.
	perUpdate := len("\r\x1b[K") + 2*len("[0] ") + len(progressBar(updates, updates))
	if limit := ranks * updates * perUpdate * 5 / 4; o.Len() > limit {
		t.Fatalf("%d bytes to the terminal for %d ranks × %d updates, more than %d", o.Len(), ranks, updates, limit)
	}
	t.Logf("%d bytes to the terminal for %d ranks × %d updates", o.Len(), ranks, updates)
	last := progressBar(updates, updates)[1:]
	if want := "\r[0] " + last + "\n\r[1] " + last + "\n"; !strings.HasSuffix(o.String(), want) {
		t.Fatalf("ends %q, want %q", o.String()[max(0, o.Len()-len(want)):], want)
	}
}

func TestLatestState(t *testing.T) {
	for in, want := range map[string]string{
		"loading 12":  "loading 12",
		"\r10%":       "\r10%",
		"\r10%\r50%":  "\r50%",
		"a\r10%\r50%": "\r50%",
		"\r10%\r":     "\r10%\r",
		"\r10%\r\r":   "\r10%\r",
		"\r":          "\r",
		"":            "",
	} {
		if got := string(latestState([]byte(in))); got != want {
			t.Errorf("latestState(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrinterOutputRanksAndTimestamps(t *testing.T) {
	var o, e bytes.Buffer
	p := NewPrinter(&o, &e, true)
	p.only = func(r int32) bool { return r == 0 || r == 2 }
	at := time.Date(2026, 11, 25, 16, 4, 5, 123e6, time.FixedZone("CET", 3600))
	p.now = func() time.Time { return at }
	for _, ev := range []*musterv1.Output{out(0, so, "a\nb\n"), out(1, so, "hidden\n"), out(2, se, "c\n"), paused(2, "\r5%"), out(2, so, "\r9%\n")} {
		p.Output(ev)
	}
	p.Close()
	ts := "2026-11-25T15:04:05.123Z "
	if want := ts + "[0] a\n" + ts + "[0] b\n" + "\r" + ts + "[2] 5%\r" + ts + "[2] 9%\n"; o.String() != want {
		t.Fatalf("stdout %q, want %q", o.String(), want)
	}
	if want := ts + "[2] c\n"; e.String() != want {
		t.Fatalf("stderr %q, want %q", e.String(), want)
	}
}

func FuzzLatestState(f *testing.F) {
	for _, s := range []string{"\r10%\r50%", "a\rb\r", "\r\r\r", "plain", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := string(latestState([]byte(s)))
		body := strings.TrimRight(got, "\r")
		switch {
		case !strings.Contains(s, "\r") && got != s:
			t.Fatalf("latestState(%q) = %q: a line without \\r changed", s, got)
		case strings.Contains(strings.TrimPrefix(body, "\r"), "\r"):
			t.Fatalf("latestState(%q) = %q keeps more than one drawing", s, got)
		case !strings.HasSuffix(strings.TrimRight(s, "\r"), body):
			t.Fatalf("latestState(%q) = %q is not the line's last drawing", s, got)
		}
	})
}
