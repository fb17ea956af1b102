package launch

import (
	"bytes"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// countingWriter records each Write, to check writes hold whole lines.
type countingWriter struct {
	bytes.Buffer
	writes []string
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return w.Buffer.Write(p)
}

func out(rank int32, stream musterv1.Stream, line string, partial bool) *musterv1.Output {
	return &musterv1.Output{Rank: rank, Stream: stream, Line: []byte(line), Partial: partial}
}

func TestPrinter(t *testing.T) {
	const so, se = musterv1.Stream_STREAM_STDOUT, musterv1.Stream_STREAM_STDERR
	tests := []struct {
		name             string
		tag              bool
		lines            []*musterv1.Output
		wantOut, wantErr string
	}{
		{"tagged", true, []*musterv1.Output{out(0, so, "a", false), out(12, se, "b", false)}, "[0] a\n", "[12] b\n"},
		{"untagged", false, []*musterv1.Output{out(0, so, "a", false), out(1, so, "", false)}, "a\n\n", ""},
		{"pieces of one rank join; others stay whole", true, []*musterv1.Output{
			out(0, so, "he", true), out(1, so, "other", false), out(0, so, "llo", false)},
			"[1] other\n[0] hello\n", ""},
		{"an unfinished piece is printed at close", true, []*musterv1.Output{out(3, se, "cut", true)}, "", "[3] cut\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o, e countingWriter
			p := NewPrinter(&o, &e, tt.tag)
			for _, l := range tt.lines {
				p.Line(l)
			}
			p.Close()
			if o.String() != tt.wantOut || e.String() != tt.wantErr {
				t.Fatalf("stdout %q stderr %q, want %q %q", o.String(), e.String(), tt.wantOut, tt.wantErr)
			}
			for _, w := range append(o.writes, e.writes...) {
				if w[len(w)-1] != '\n' {
					t.Fatalf("a write ends mid-line: %q", w)
				}
			}
		})
	}
}

func TestPrinterFlushesLargeOutputInWholeLines(t *testing.T) {
	var o countingWriter
	p := NewPrinter(&o, &o, true)
	line := string(bytes.Repeat([]byte("x"), 1000))
	for i := 0; i < 200; i++ {
		p.Line(out(int32(i%3), musterv1.Stream_STREAM_STDOUT, line, false))
	}
	if len(o.writes) < 2 {
		t.Fatalf("%d writes for 200 KB: the printer does not flush as it goes", len(o.writes))
	}
	for _, w := range o.writes {
		if w[len(w)-1] != '\n' {
			t.Fatal("a write ends mid-line")
		}
	}
}
