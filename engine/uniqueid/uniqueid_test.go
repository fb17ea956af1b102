package uniqueid

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

func TestUniqueIDGolden(t *testing.T) {
	const ncclMagic = 0x0280028002800280
	tests := []struct {
		name string
		root string
		want string // the first 36 bytes; the rest must be zero
	}{
		{"ipv4 from DESIGN.md", "10.0.0.1:29500",
			"8002800280028002" + "0200" + "733c" + "0a000001" + strings.Repeat("00", 20)},
		{"ipv4 loopback", "127.0.0.1:1",
			"8002800280028002" + "0200" + "0001" + "7f000001" + strings.Repeat("00", 20)},
		{"ipv6", "[fd00::1]:29500",
			"8002800280028002" + "0a00" + "733c" + "00000000" + "fd000000000000000000000000000001" + "00000000"},
		{"ipv6 numeric scope", "[fe80::1%3]:80",
			"8002800280028002" + "0a00" + "0050" + "00000000" + "fe800000000000000000000000000001" + "03000000"},
		{"ipv4-mapped ipv6 becomes ipv4", "[::ffff:10.0.0.1]:29500",
			"8002800280028002" + "0200" + "733c" + "0a000001" + strings.Repeat("00", 20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := NewWithMagic(ncclMagic, netip.MustParseAddrPort(tt.root))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want + strings.Repeat("00", Bytes-len(tt.want)/2)
			if got := hex.EncodeToString(id[:]); got != want {
				t.Fatalf("bytes:\n got %s\nwant %s", got, want)
			}
			back, err := Parse(id.Hex())
			if err != nil || back != id {
				t.Fatalf("hex round trip: %v", err)
			}
			root, err := id.Root()
			if err != nil {
				t.Fatal(err)
			}
			if want := netip.MustParseAddrPort(tt.root); root.Port() != want.Port() || root.Addr().Unmap() != want.Addr().Unmap().WithZone("") {
				t.Fatalf("root = %v, want %v", root, want)
			}
		})
	}
}

func TestNewUniqueIDRandomMagic(t *testing.T) {
	root := netip.MustParseAddrPort("127.0.0.1:29500")
	a, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(root)
	if string(a[0:8]) == string(b[0:8]) {
		t.Fatal("two minted ids share a magic")
	}
	if string(a[8:]) != string(b[8:]) {
		t.Fatal("ids for one root differ past the magic")
	}
}

func TestUniqueIDErrors(t *testing.T) {
	if _, err := New(netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), 0)); err == nil {
		t.Error("port 0 accepted")
	}
	for _, s := range []string{"", "00", strings.Repeat("zz", 128), strings.Repeat("0", 257)} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%.10q...) accepted", s)
		}
	}
}

func FuzzParseUniqueID(f *testing.F) {
	f.Add(strings.Repeat("ab", 128))
	f.Add("xyz")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			return
		}
		if !strings.EqualFold(id.Hex(), s) {
			t.Fatalf("round trip %q -> %q", s, id.Hex())
		}
	})
}
