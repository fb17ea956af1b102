package tcpstore

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// TestClientRoundTrips runs every request once, in an order where each step
// sees what the earlier ones left.
func TestClientRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, startServer(t).Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := func(s string) []byte { return []byte(s) }
	steps := []struct {
		name string
		do   func() (any, error)
		want any
	}{
		{"ping", func() (any, error) { return nil, c.Ping(0xdeadbeef) }, nil},
		{"set", func() (any, error) { return nil, c.Set("a", b("1")) }, nil},
		{"get", func() (any, error) { return c.Get("a") }, b("1")},
		{"compare set hit", func() (any, error) { return c.CompareSet("a", b("1"), b("2")) }, b("2")},
		{"compare set miss", func() (any, error) { return c.CompareSet("a", b("1"), b("3")) }, b("2")},
		{"compare set new", func() (any, error) { return c.CompareSet("n", nil, b("x")) }, b("x")},
		{"add new", func() (any, error) { return c.Add("cnt", 5) }, int64(5)},
		{"add", func() (any, error) { return c.Add("cnt", -2) }, int64(3)},
		{"check ready", func() (any, error) { return c.Check("a", "cnt") }, true},
		{"check not ready", func() (any, error) { return c.Check("a", "nope") }, false},
		{"wait ready", func() (any, error) { return nil, c.Wait(ctx, "a", "cnt") }, nil},
		{"append", func() (any, error) { return nil, c.Append("a", b("+")) }, nil},
		{"multi set", func() (any, error) { return nil, c.MultiSet([]string{"m1", "m2"}, [][]byte{b("x"), b("")}) }, nil},
		{"multi get", func() (any, error) { return c.MultiGet("a", "m1", "m2") }, [][]byte{b("2+"), b("x"), b("")}},
		{"num keys", func() (any, error) { return c.NumKeys() }, int64(5)},
		{"delete", func() (any, error) { return c.Delete("m2") }, true},
		{"delete missing", func() (any, error) { return c.Delete("m2") }, false},
		{"queue push", func() (any, error) { return nil, c.QueuePush("q", b("item")) }, nil},
		{"queue len", func() (any, error) { return c.QueueLen("q") }, int64(1)},
		{"queue pop", func() (any, error) { n, v, err := c.QueuePop("q"); return []any{n, v}, err }, []any{int64(1), b("item")}},
		{"queue pop empty", func() (any, error) { n, v, err := c.QueuePop("q"); return []any{n, v}, err }, []any{int64(0), []byte(nil)}},
		{"wait canceled", func() (any, error) {
			wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer wcancel()
			return errors.Is(c.Wait(wctx, "never"), context.DeadlineExceeded), nil
		}, true},
		{"usable after cancel", func() (any, error) { return c.Get("n") }, b("x")},
	}
	for _, s := range steps {
		got, err := s.do()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("%s: got %#v, want %#v", s.name, got, s.want)
		}
	}
}

// TestWaitWoken checks that a WAIT in flight returns once another client sets the key.
func TestWaitWoken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := startServer(t)
	addr := srv.Addr().String()
	w, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() {
		testwait.Until(t, 10*time.Second, "the server to put the WAIT aside", func() bool { return srv.waits.Load() == 1 })
		s.Set("late", []byte("v"))
	}()
	if err := w.Wait(ctx, "late"); err != nil {
		t.Fatal(err)
	}
}
