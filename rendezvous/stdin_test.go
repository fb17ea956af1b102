package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// readAll reads session's chunks until EOF or an error.
func readAll(t *testing.T, r *StdinRelay, session string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	for {
		data, err := r.Read(ctx, session)
		if err == io.EOF {
			return string(out), nil
		}
		if err != nil {
			return string(out), err
		}
		out = append(out, data...)
	}
}

func TestStdinRelayCopiesToEveryReader(t *testing.T) {
	r := newStdinRelay([]string{"a", "b"})
	if err := r.attachWriter(); err != nil {
		t.Fatal(err)
	}
	if err := r.attachWriter(); err == nil {
		t.Fatal("a second writer attached")
	}
	for _, s := range []string{"a", "b"} {
		if err := r.openReader(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.openReader("c"); err == nil {
		t.Fatal("a node without a stdin rank reads stdin")
	}
	got := make(chan string, 2)
	for _, s := range []string{"a", "b"} {
		go func() {
			out, err := readAll(t, r, s)
			if err != nil {
				out = err.Error()
			}
			got <- out
		}()
	}
	want := ""
	for i := 0; i < 100; i++ {
		chunk := fmt.Sprintf("line %d\n", i)
		want += chunk
		if err := r.Write(context.Background(), []byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	r.CloseWrite()
	for i := 0; i < 2; i++ {
		if out := <-got; out != want {
			t.Fatalf("a reader got %d bytes, want %d", len(out), len(want))
		}
	}
}

// writeUntilBlocked writes chunks until a write blocks, and returns how many
// went in; the blocked write goes on in the background.
func writeUntilBlocked(t *testing.T, r *StdinRelay) (int, chan error) {
	t.Helper()
	for n := 0; n < 10*stdinChunks; n++ {
		done := make(chan error, 1)
		go func() { done <- r.Write(context.Background(), make([]byte, 1024)) }()
		testwait.Until(t, 10*time.Second, "the write to return or wait", func() bool { return len(done) > 0 || r.waitingWrites.Load() > 0 })
		if r.waitingWrites.Load() > 0 {
			return n, done
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the writer never waited for its readers")
	return 0, nil
}

func TestStdinRelayHoldsFewChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		unblock func(r *StdinRelay) error // makes room, or ends the relay
		wantErr error
	}{
		{"the slow reader reads", func(r *StdinRelay) error { _, err := r.Read(context.Background(), "slow"); return err }, nil},
		{"the slow reader leaves", func(r *StdinRelay) error { r.Leave("slow"); return nil }, nil},
		{"the job ends", func(r *StdinRelay) error { r.close(); return nil }, ErrStdinClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newStdinRelay([]string{"fast", "slow"})
			r.openReader("fast")
			r.openReader("slow")
			// The fast reader reads everything; the slow one nothing.
			go readAll(t, r, "fast")
			n, blocked := writeUntilBlocked(t, r)
			if n != stdinChunks {
				t.Fatalf("the store took %d chunks before waiting, want %d", n, stdinChunks)
			}
			if err := tt.unblock(r); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-blocked:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("write = %v, want %v", err, tt.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the writer stayed blocked")
			}
		})
	}
}

func TestStdinRelayEnds(t *testing.T) {
	// Every reader gone: the writer hears that nobody reads on.
	r := newStdinRelay([]string{"a"})
	r.openReader("a")
	r.Leave("a")
	if err := r.Write(context.Background(), []byte("x")); !errors.Is(err, ErrStdinClosed) {
		t.Fatalf("write with no reader = %v", err)
	}
	if err := r.openReader("a"); err == nil {
		t.Fatal("a reader that left read again")
	}
	// The job ended: a waiting reader stops.
	r = newStdinRelay([]string{"a"})
	r.openReader("a")
	errc := make(chan error, 1)
	go func() { _, err := r.Read(context.Background(), "a"); errc <- err }()
	testwait.Until(t, 10*time.Second, "the read to wait", func() bool { return r.waitingReads.Load() > 0 })
	r.close()
	if err := <-errc; !errors.Is(err, ErrStdinClosed) {
		t.Fatalf("read after the job ended = %v", err)
	}
}
