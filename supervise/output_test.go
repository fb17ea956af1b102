package supervise

import (
	"os"
	"strings"
	"testing"
	"time"
)

type chunk struct {
	data   string
	paused bool
}

// readAll writes each piece of input to a pipe, pausing where asked, and
// returns what the Reader handed on.
func readAll(t *testing.T, input []string, pause time.Duration) ([]chunk, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, s := range input {
			w.WriteString(s)
			time.Sleep(pause)
		}
		w.Close()
	}()
	var got []chunk
	err = NewReader(r).Read(func(d []byte, p bool) { got = append(got, chunk{string(d), p}) })
	return got, err
}

func TestReaderChunks(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxChunk)
	tests := []struct {
		name  string
		input []string
		pause time.Duration
		want  []chunk
	}{
		{"nothing", nil, 0, nil},
		{"whole lines together", []string{"a\nbb\n"}, 0, []chunk{{"a\nbb\n", false}}},
		{"a last line without newline", []string{"a\nb"}, 0, []chunk{{"a\n", false}, {"b", false}}},
		{"a long line in pieces", []string{long + "yz\n"}, 0, []chunk{{long, false}, {"yz\n", false}}},
		// A progress bar: each state shows up when written, not at the next newline.
		{"paused pieces", []string{"\r10%", "\r50%", "\r100%\n"}, 3 * PauseFlush / 2,
			[]chunk{{"\r10%", true}, {"\r50%", true}, {"\r100%\n", false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(t, tt.input, tt.pause)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d chunks %.200v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("chunk %d: %.80v, want %.80v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestReaderCut(t *testing.T) {
	r, w, _ := os.Pipe()
	defer w.Close() // a writer that never closes, as a process in D state
	w.WriteString("last words\n")
	rd := NewReader(r)
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
		if err != ErrCut || len(got) != 0 {
			t.Fatalf("err %v, and %d more pieces", err, len(got))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Cut did not end Read")
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("a\nb\r\nc"), uint8(3))
	f.Add([]byte(strings.Repeat("y", MaxChunk+10)), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		r, w, _ := os.Pipe()
		go func() {
			k := int(split) % (len(in) + 1)
			w.Write(in[:k])
			w.Write(in[k:])
			w.Close()
		}()
		var all []byte
		err := NewReader(r).Read(func(d []byte, paused bool) {
			if len(d) == 0 || len(d) > MaxChunk {
				t.Fatalf("chunk of %d bytes", len(d))
			}
			all = append(all, d...)
		})
		if err != nil || string(all) != string(in) {
			t.Fatalf("err %v; output differs from input", err)
		}
	})
}
