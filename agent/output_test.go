package agent

import (
	"bytes"
	"strings"
	"testing"
)

func TestTailKeepsLastLines(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"lines", []string{"a\nb\n"}, []string{"a", "b"}},
		{"a line in pieces", []string{"he", "llo\nwor", "ld\n"}, []string{"hello", "world"}},
		{"unfinished last line", []string{"a\nb"}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		var tl tail
		for _, c := range tt.chunks {
			tl.add([]byte(c))
		}
		if got := tl.get(); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	var tl tail
	for i := 0; i < tailLines+5; i++ {
		tl.add([]byte(strings.Repeat("e", i) + "\n"))
	}
	tl.add(append(bytes.Repeat([]byte("w"), 5000), '\n'))
	got := tl.get()
	if len(got) != tailLines || got[0] != strings.Repeat("e", 6) || len(got[tailLines-1]) != tailLineBytes {
		t.Fatalf("tail: %d lines, first %q, last %d bytes", len(got), got[0], len(got[tailLines-1]))
	}
}
