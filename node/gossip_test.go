package node

import (
	"strings"
	"testing"
)

func TestGossipFlags(t *testing.T) {
	tests := []struct {
		g       Gossip
		want    string // in the error; "" for none
		joinOut string // the normalised peers
	}{
		{g: Gossip{Join: []string{"10.0.0.1", "head:8000", "[fe80::1]:7946", "fe80::2"}}, joinOut: "10.0.0.1:7946 head:8000 [fe80::1]:7946 [fe80::2]:7946"},
		{g: Gossip{Join: []string{"10.0.0.1:99999"}}, want: `--join "10.0.0.1:99999": port "99999" is not a number from 0 to 65535`},
		{g: Gossip{Join: []string{"http://head"}}, want: `--join "http://head": want HOST or HOST:PORT`},
		{g: Gossip{Join: []string{":7946"}}, want: "want HOST or HOST:PORT"},
		{g: Gossip{Bind: "localhost"}, want: "--bind \"localhost\": localhost is not an IP address"},
		{g: Gossip{Bind: "10.0.0.1:x"}, want: `--bind "10.0.0.1:x"`},
		{g: Gossip{Bind: "10.0.0.1:7000"}},
		{g: Gossip{Advertise: "0.0.0.0"}, want: "other nodes cannot reach an unspecified address"},
		{g: Gossip{Advertise: "head"}, want: "head is not an IP address"},
		{g: Gossip{Advertise: "10.0.0.2:7001"}},
	}
	for _, tt := range tests {
		err := tt.g.Check()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.g, err, tt.want)
		}
		if tt.joinOut != "" {
			got, _ := JoinAddrs(tt.g.Join)
			if strings.Join(got, " ") != tt.joinOut {
				t.Errorf("join %v: %v, want %s", tt.g.Join, got, tt.joinOut)
			}
		}
	}
}

func FuzzJoinAddrs(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "head:7946", "[::1]:1", "fe80::1", ":1", "a:b:c", "x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := JoinAddrs([]string{s})
		if err == nil && s != "" && len(out) != 1 {
			t.Fatalf("%q: %v", s, out)
		}
	})
}
