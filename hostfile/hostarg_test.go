package hostfile

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseHostArg(t *testing.T) {
	tests := []struct {
		in   string
		want []Host
	}{
		// The --host examples of Open MPI's documentation.
		{"a,b,c", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}, {Name: "c", Slots: 1}}},
		{"a,b:2,c:3", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 2}, {Name: "c", Slots: 3}}},
		{"node01.example.com:2", []Host{{Name: "node01.example.com", Slots: 2}}},
		{"a:2,b,a,a:3", []Host{{Name: "a", Slots: 6}, {Name: "b", Slots: 1}}},
		{" a , 10.0.0.1:4", []Host{{Name: "a", Slots: 1}, {Name: "10.0.0.1", Slots: 4}}},
	}
	for _, tt := range tests {
		got, err := ParseHostArg(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHostArg(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseHostArgErrors(t *testing.T) {
	tests := []struct{ in, msg string }{
		{"", `empty entry in host list ""`},
		{"a,,b", `empty entry in host list "a,,b"`},
		{"a:0", `host a: slots must be a positive integer, got "0"`},
		{"a:x", `host a: slots must be a positive integer, got "x"`},
		{"a b", `invalid host name "a b"`},
		{"n[1-2]", `invalid host name "n[1-2]"`},
		{"fe80::1", "IPv6 addresses are not supported here"},
		{"u@a", "user names are not supported here"},
		{strings.Repeat("a,", MaxArgLen), "host list longer than"},
	}
	for _, tt := range tests {
		_, err := ParseHostArg(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseHostArg(%.40q) error = %v, want %q", tt.in, err, tt.msg)
		}
	}
}

// FuzzParseHostArg: no panic, valid hosts, and writing the hosts back as
// host:N gives the same list.
func FuzzParseHostArg(f *testing.F) {
	for _, s := range []string{"a,b:2,c:3", "a:2,b,a", "a:0", "fe80::1", "a,,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hosts, err := ParseHostArg(in)
		if err != nil {
			return
		}
		var parts []string
		for _, h := range hosts {
			if err := checkHost(h); err != nil || h.Slots < 1 {
				t.Fatalf("ParseHostArg(%q) gave %+v: %v", in, h, err)
			}
			parts = append(parts, h.Name+":"+strconv.Itoa(h.Slots))
		}
		again, err := ParseHostArg(strings.Join(parts, ","))
		if err != nil || !reflect.DeepEqual(again, hosts) {
			t.Fatalf("%q -> %+v -> %+v, %v", in, hosts, again, err)
		}
	})
}
