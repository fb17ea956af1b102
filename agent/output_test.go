package agent

import (
	"bytes"
	"strings"
	"testing"
	"testing/iotest"
)

type piece struct {
	line    string
	partial bool
}

func collect(t *testing.T, input string, oneByte bool) []piece {
	t.Helper()
	var got []piece
	r := strings.NewReader(input)
	var err error
	if oneByte {
		err = readLines(iotest.OneByteReader(r), func(l []byte, p bool) { got = append(got, piece{string(l), p}) })
	} else {
		err = readLines(r, func(l []byte, p bool) { got = append(got, piece{string(l), p}) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("x", maxLine)
	tests := []struct {
		name  string
		input string
		want  []piece
	}{
		{"empty", "", nil},
		{"lines", "a\nbb\n", []piece{{"a", false}, {"bb", false}}},
		{"empty lines kept", "\n\n", []piece{{"", false}, {"", false}}},
		{"last line without newline", "a\nb", []piece{{"a", false}, {"b", false}}},
		{"carriage returns kept", "a\r\n", []piece{{"a\r", false}}},
		{"long line in pieces", long + "yz\n", []piece{{long, true}, {"yz", false}}},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			got := collect(t, tt.input, oneByte)
			if len(got) != len(tt.want) {
				t.Fatalf("%s: %d pieces, want %d", tt.name, len(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("%s: piece %d = %.20q %v, want %.20q %v", tt.name, i, got[i].line, got[i].partial, tt.want[i].line, tt.want[i].partial)
				}
			}
		}
	}
}

// FuzzReadLines checks that pieces put back together are the input, and that
// no piece is longer than maxLine.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("a\nb"))
	f.Add([]byte("\n\n\r\n"))
	f.Add(bytes.Repeat([]byte("z"), maxLine+3))
	f.Fuzz(func(t *testing.T, in []byte) {
		var rebuilt bytes.Buffer
		readLines(bytes.NewReader(in), func(l []byte, partial bool) {
			if len(l) > maxLine {
				t.Fatalf("piece of %d bytes", len(l))
			}
			rebuilt.Write(l)
			if !partial {
				rebuilt.WriteByte('\n')
			}
		})
		want := in
		if len(in) > 0 && in[len(in)-1] != '\n' {
			want = append(append([]byte(nil), in...), '\n')
		}
		if !bytes.Equal(rebuilt.Bytes(), want) {
			t.Fatalf("rebuilt %q from %q", rebuilt.Bytes(), in)
		}
	})
}

func TestTailKeepsLastLines(t *testing.T) {
	var tl tail
	for i := 0; i < tailLines+5; i++ {
		tl.add([]byte(strings.Repeat("e", i)), false)
	}
	tl.add(bytes.Repeat([]byte("w"), 5000), false)
	got := tl.get()
	if len(got) != tailLines || got[0] != strings.Repeat("e", 6) || len(got[tailLines-1]) != tailLineBytes {
		t.Fatalf("tail: %d lines, first %q, last %d bytes", len(got), got[0], len(got[tailLines-1]))
	}
}
