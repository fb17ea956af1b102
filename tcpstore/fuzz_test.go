package tcpstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

func validated() query { return query{}.op(opValidate).u32(validateMagic) }

// append adds raw bytes, for requests cut short.
func (b query) append(s string) query { return append(b, s...) }

// FuzzServer sends any bytes after VALIDATE: the server may close that
// connection, and must still serve the next one.
func FuzzServer(f *testing.F) {
	addr := startServer(f).Addr().String()
	seeds := []query{
		query{}.op(opPing).u32(7),
		query{}.op(opSet).str("k").str("v"),
		query{}.op(opCompareSet).str("k").str("").str("x"),
		query{}.op(opGet).str("k"),
		query{}.op(opAdd).str("n").u64(3),
		query{}.op(opAdd).str("k").u64(1),
		query{}.op(opCheck).keys([]string{"k", "n"}),
		query{}.op(opWait).keys([]string{"never"}),
		query{}.op(opWait).keys([]string{"never"}).op(opCancelWait),
		query{}.op(opNumKeys),
		query{}.op(opDeleteKey).str("k"),
		query{}.op(opAppend).str("a").str("xy"),
		query{}.op(opMultiGet).keys([]string{"a", "k"}),
		query{}.op(opMultiSet).u64(2).str("a").str("1").str("b").str("2"),
		query{}.op(opQueuePush).str("q").str("item"),
		query{}.op(opQueuePop).str("q"),
		query{}.op(opQueueLen).str("q"),
		query{}.op(opSet).u64(1 << 62),
		query{}.op(opMultiGet).u64(1 << 40),
		query{}.op(17),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(append(validated(), data...))
		nc.(*net.TCPConn).CloseWrite()
		// The server answers what it can, then closes: it must not hang. A
		// close with input unread is a reset, and a close too.
		if _, err := io.Copy(io.Discard, nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the server did not close the connection: %v", err)
		}
		ping(t, addr)
	})
}

// ping checks the server answers a new client.
func ping(t testing.TB, addr string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(validated().op(opPing).u32(0xabcd)); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil || binary.LittleEndian.Uint32(b[:]) != 0xabcd {
		t.Fatalf("ping: %x, %v", b, err)
	}
}

// FuzzClientReplies has a server answer anything: every client call returns
// a value or an error, and none hangs.
func FuzzClientReplies(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(query{}.u64(3).append("abc").u64(7).append("\x00").u64(1 << 40)))
	f.Add([]byte(query{}.u64(2).u64(1).append("a").u64(1).append("b").append("\x01\x00\x01")))
	f.Fuzz(func(t *testing.T, replies []byte) {
		cli, srv := net.Pipe()
		go io.Copy(io.Discard, srv)
		go func() {
			srv.Write(replies)
			srv.Close()
		}()
		c := &Client{conn: cli, r: bufio.NewReader(cli)}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Get("k")
		c.Add("n", 1)
		c.CompareSet("k", []byte("a"), []byte("b"))
		c.Check("a", "b")
		c.MultiGet("a", "b")
		c.QueuePop("q")
		c.QueueLen("q")
		c.NumKeys()
		c.Delete("k")
		c.Wait(ctx, "w")
		c.Ping(1)
	})
}
