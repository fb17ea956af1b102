package tcpstore

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// wire builds raw requests for tests: an opcode, then fields as the
// protocol lays them out.
type wire []byte

func (w wire) op(op byte) wire   { return append(w, op) }
func (w wire) u32(v uint32) wire { return binary.LittleEndian.AppendUint32(w, v) }
func (w wire) u64(v uint64) wire { return binary.LittleEndian.AppendUint64(w, v) }
func (w wire) str(s string) wire { return append(w.u64(uint64(len(s))), s...) }
func validated() wire            { return wire{}.op(opValidate).u32(validateMagic) }
func (w wire) keys(ks ...string) wire {
	w = w.u64(uint64(len(ks)))
	for _, k := range ks {
		w = w.str(k)
	}
	return w
}

// FuzzServer sends any bytes after VALIDATE: the server may close that
// connection, and must still serve the next one.
func FuzzServer(f *testing.F) {
	_, addr := startServer(f)
	seeds := []wire{
		wire{}.op(opPing).u32(7),
		wire{}.op(opSet).str("k").str("v"),
		wire{}.op(opCompareSet).str("k").str("").str("x"),
		wire{}.op(opGet).str("k"),
		wire{}.op(opAdd).str("n").u64(3),
		wire{}.op(opAdd).str("k").u64(1),
		wire{}.op(opCheck).keys("k", "n"),
		wire{}.op(opWait).keys("never"),
		wire{}.op(opWait).keys("never").op(opCancelWait),
		wire{}.op(opNumKeys),
		wire{}.op(opDeleteKey).str("k"),
		wire{}.op(opAppend).str("a").str("xy"),
		wire{}.op(opMultiGet).keys("a", "k"),
		wire{}.op(opMultiSet).u64(2).str("a").str("1").str("b").str("2"),
		wire{}.op(opQueuePush).str("q").str("item"),
		wire{}.op(opQueuePop).str("q"),
		wire{}.op(opQueueLen).str("q"),
		wire{}.op(opSet).u64(1 << 62),
		wire{}.op(opMultiGet).u64(1 << 40),
		wire{}.op(17),
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
		// The server answers what it can, then closes: it must not hang.
		if _, err := io.Copy(io.Discard, nc); err != nil {
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
