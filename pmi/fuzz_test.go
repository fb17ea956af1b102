package pmi

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func FuzzParseV1(f *testing.F) {
	for _, s := range []string{
		"cmd=init pmi_version=1 pmi_subversion=1",
		`cmd=put kvsname=k key=a value=x\ y\\z`,
		"cmd=barrier_in  group=WORLD:1 alone",
		"cmd=", "cmd=a=b=c", `cmd=x v=\`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c, err := parseV1(line)
		if err != nil {
			return
		}
		if c.name == "" {
			t.Fatalf("%q: parsed with no name", line)
		}
		// Whatever parsed formats back into a line that parses the same.
		var kv []string
		for _, a := range c.args {
			kv = append(kv, a.key, a.value)
		}
		b, err := formatV1(c.name, kv...)
		if err != nil || strings.ContainsAny(c.name, " \\") {
			return
		}
		again, err := parseV1(strings.TrimSuffix(string(b), "\n"))
		if err != nil || again.name != c.name || len(again.args) != len(c.args) {
			t.Fatalf("%q: formatted %q parses as %+v, %v", line, b, again, err)
		}
		for i := range c.args {
			if again.args[i] != c.args[i] {
				t.Fatalf("%q: token %d %+v became %+v", line, i, c.args[i], again.args[i])
			}
		}
	})
}

// FuzzEscape: any value without newline or NUL survives a reply line.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a b", `a\b`, `\`, " ", "", "x=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		b, err := formatV1("get_result", "value", value)
		if strings.ContainsAny(value, "\n\x00") {
			if err == nil {
				t.Fatalf("%q: formatted", value)
			}
			return
		}
		c, err := parseV1(strings.TrimSuffix(string(b), "\n"))
		if err != nil {
			t.Fatalf("%q: %q does not parse: %v", value, b, err)
		}
		if got, _ := c.get("value"); got != value {
			t.Fatalf("%q came back as %q", value, got)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	for _, s := range []string{
		"    17cmd=fullinit;a=b;", "000010cmd=x;y=z;", "     0", "-00001", "999999", "  abcd",
		"    11cmd=x;k y=;",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		body, err := readFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(body) > maxFrame {
			t.Fatalf("frame of %d bytes read", len(body))
		}
		c, err := parseV2(body)
		if err != nil {
			return
		}
		var kv []string
		for _, a := range c.args {
			kv = append(kv, a.key, a.value)
		}
		if strings.Contains(c.name, ";") {
			t.Fatalf("name %q holds ';'", c.name)
		}
		b, err := formatV2(c.name, kv...)
		if err != nil {
			return
		}
		again, err := readFrame(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%q formatted as %q: %v", body, b, err)
		}
		if c2, err := parseV2(again); err != nil || c2.name != c.name || len(c2.args) != len(c.args) {
			t.Fatalf("%q formatted as %q parses as %+v, %v", body, b, c2, err)
		}
	})
}

// FuzzServe feeds arbitrary bytes to Serve: it must return, without a
// panic, within its context's deadline.
func FuzzServe(f *testing.F) {
	for _, s := range []string{
		"cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\ncmd=barrier_in\ncmd=finalize\n",
		"cmd=initack pmiid=0\ncmd=put kvsname=muster-test key=a value=b\ncmd=get kvsname=muster-test key=a\n",
		"cmd=init pmi_version=2 pmi_subversion=0\n    22cmd=fullinit;pmirank=0;    10cmd=kvs-fence;",
		"cmd=init pmi_version=2 pmi_subversion=0\n    37cmd=info-getnodeattr;key=k;wait=TRUE;",
		"mcmd=spawn\nnprocs=1\nendcmd\ncmd=abort exitcode=3\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		j := testJob(t, 1)
		j.Logger = nil
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv, cli := net.Pipe()
		done := make(chan Result, 1)
		go func() { done <- j.Serve(ctx, srv, 0) }()
		// Replies are drained so that the server never blocks on a write.
		go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(cli)) }()
		go func() {
			_, _ = cli.Write(in)
			_ = cli.Close()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return")
		}
	})
}
