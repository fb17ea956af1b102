package ras

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRAS plays NCCL's side of the RAS client protocol on 127.0.0.1, the
// way client_support.cc's rasClientEventLoop answers.
type fakeRAS struct {
	hello      string // the answer to CLIENT PROTOCOL; "SERVER PROTOCOL 2" when ""
	acceptJSON bool   // answers OK to SET FORMAT json, as NCCL 2.28.7 and later
	text, json []byte // the reports
	closeAfter string // a command after which the server closes without answering
	silent     bool   // reads commands and never answers

	mu   sync.Mutex
	cmds [][]string // per connection, the commands received
}

func (f *fakeRAS) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return ln.Addr().String()
}

func (f *fakeRAS) serve(c net.Conn) {
	defer c.Close()
	f.mu.Lock()
	conn := len(f.cmds)
	f.cmds = append(f.cmds, nil)
	f.mu.Unlock()
	in := bufio.NewReader(c)
	format := "text"
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimRight(line, "\r\n")
		f.mu.Lock()
		f.cmds[conn] = append(f.cmds[conn], cmd)
		f.mu.Unlock()
		if f.silent {
			continue
		}
		if cmd == f.closeAfter {
			return
		}
		up := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(up, "CLIENT PROTOCOL "):
			hello := f.hello
			if hello == "" {
				hello = "SERVER PROTOCOL 2"
			}
			c.Write([]byte(hello + "\n"))
		case strings.HasPrefix(up, "TIMEOUT "):
			c.Write([]byte("OK\n"))
		case up == "SET FORMAT JSON" && f.acceptJSON:
			format = "json"
			c.Write([]byte("OK\n"))
		case up == "STATUS" || up == "VERBOSE STATUS":
			if format == "json" {
				c.Write(f.json)
			} else {
				c.Write(f.text)
			}
			return
		default:
			c.Write([]byte("ERROR: Unknown command " + cmd + "\n"))
		}
	}
}

func (f *fakeRAS) commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cmds
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestQuery(t *testing.T) {
	text := readFixture(t, "nccl-2.28.9-mismatch.txt")
	js := readFixture(t, "nccl-2.28.9-mismatch.json")
	// Over MaxReportSize: JSON padded with spaces, text with lines NCCL
	// does not print (and the parser would skip).
	bigJSON := append(bytes.Repeat([]byte(" "), MaxReportSize), js...)
	bigText := append(text, bytes.Repeat([]byte("  padding\n"), MaxReportSize/10+1)...)
	askJSON := []string{"CLIENT PROTOCOL 2", "TIMEOUT 2", "SET FORMAT json", "VERBOSE STATUS"}

	tests := []struct {
		name    string
		server  *fakeRAS
		format  string     // of the report got
		proto   int        // its ServerProtocol
		cmds    [][]string // what the server heard, per connection
		wantErr string
	}{
		{
			name:   "JSON",
			server: &fakeRAS{acceptJSON: true, text: text, json: js},
			format: "json", proto: 2, cmds: [][]string{askJSON},
		},
		{
			name:   "no SET FORMAT before 2.28.7: text",
			server: &fakeRAS{text: text},
			format: "text", proto: 2, cmds: [][]string{askJSON},
		},
		{
			name:   "another protocol version",
			server: &fakeRAS{hello: "SERVER PROTOCOL 3", acceptJSON: true, text: text, json: js},
			format: "json", proto: 3, cmds: [][]string{askJSON},
		},
		{
			name:   "JSON too large: asked again as text",
			server: &fakeRAS{acceptJSON: true, text: text, json: bigJSON},
			format: "text", proto: 2,
			cmds: [][]string{askJSON, {"CLIENT PROTOCOL 2", "TIMEOUT 2", "VERBOSE STATUS"}},
		},
		{
			name:    "text too large",
			server:  &fakeRAS{text: bigText},
			wantErr: "reading the report: report larger than 1048576 bytes",
		},
		{
			name:    "closes after CLIENT PROTOCOL",
			server:  &fakeRAS{closeAfter: "CLIENT PROTOCOL 2"},
			wantErr: "CLIENT PROTOCOL 2: server closed the connection",
		},
		{
			name:    "closes without a report",
			server:  &fakeRAS{closeAfter: "VERBOSE STATUS"},
			wantErr: "without a report",
		},
		{
			name:    "closes in the middle of the text report",
			server:  &fakeRAS{text: text[:len(text)/2]},
			wantErr: "the server closed early",
		},
		{
			name:    "closes in the middle of the JSON report",
			server:  &fakeRAS{acceptJSON: true, json: js[:len(js)/2]},
			wantErr: "parsing the json report",
		},
		{
			name:    "not RAS",
			server:  &fakeRAS{hello: "HTTP/1.1 400 Bad Request"},
			wantErr: `CLIENT PROTOCOL: unexpected answer "HTTP/1.1 400 Bad Request"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.server.start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := Query(ctx, addr, 1500*time.Millisecond)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "NCCL RAS at "+addr+": ") {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Format != tt.format || r.ServerProtocol != tt.proto {
				t.Errorf("format %q, protocol %d", r.Format, r.ServerProtocol)
			}
			want := []Culprit{{Comm: "5974ff3706582d81", Op: "AllReduce", Member: member(2, 2, 1083, "192.0.2.2", 20), OthersLaunched: 21}}
			if got := r.Culprits(); !reflect.DeepEqual(got, want) {
				t.Errorf("culprits %+v", got)
			}
			if len(r.Raw) == 0 || len(r.Raw) > MaxReportSize {
				t.Errorf("raw of %d bytes", len(r.Raw))
			}
			if got := tt.server.commands(); !reflect.DeepEqual(got, tt.cmds) {
				t.Errorf("server heard %q, want %q", got, tt.cmds)
			}
		})
	}
}

// A server that never answers leaves Query to its deadline.
func TestQueryNoAnswer(t *testing.T) {
	addr := (&fakeRAS{silent: true}).start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Query(ctx, addr, time.Second)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "CLIENT PROTOCOL 2") {
		t.Errorf("error %v, want a deadline in CLIENT PROTOCOL", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("waited %v", waited)
	}
}

func TestQueryCancel(t *testing.T) {
	addr := (&fakeRAS{silent: true}).start(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := Query(ctx, addr, time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

func TestQueryConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Query(context.Background(), addr, time.Second)
	if err == nil || !strings.HasPrefix(err.Error(), "NCCL RAS at "+addr+": connecting: ") {
		t.Errorf("error %v", err)
	}
}

func TestTimeoutSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want int64
	}{
		{0, 1},
		{-time.Second, 1},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{30 * time.Second, 30},
		{1 << 62, 86400},
	}
	for _, tt := range tests {
		if got := timeoutSeconds(tt.in); got != tt.want {
			t.Errorf("timeoutSeconds(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
