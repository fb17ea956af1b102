package hostfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseMPICH(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Host
	}{
		{
			// The examples of MPICH's Hydra documentation.
			"hydra plain", "donner\nfoo\nshakey\nterra\n",
			[]Host{{Name: "donner", Slots: 1}, {Name: "foo", Slots: 1}, {Name: "shakey", Slots: 1}, {Name: "terra", Slots: 1}},
		},
		{
			"hydra counts", "donner:2\nfoo:2\nshakey:2\nterra:2\n",
			[]Host{{Name: "donner", Slots: 2}, {Name: "foo", Slots: 2}, {Name: "shakey", Slots: 2}, {Name: "terra", Slots: 2}},
		},
		{
			"hydra comments",
			"# This is a sample host file\ndonner:2     # The first 2 procs are scheduled to run here\nfoo:3        # The next 3 procs run on this host\n",
			[]Host{{Name: "donner", Slots: 2}, {Name: "foo", Slots: 3}},
		},
		{"repeats add up", "a:2\nb\na\n", []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 1}}},
		{"ipv4", "10.0.0.1:4\r\n", []Host{{Name: "10.0.0.1", Slots: 4}}},
	}
	for _, tt := range tests {
		got, err := Parse("h", strings.NewReader(tt.in), MPICH)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseMPICHErrors(t *testing.T) {
	tests := []struct {
		in   string
		line int
		msg  string
	}{
		{"a:x", 1, `host a: slots must be a positive integer, got "x"`},
		{"a\nb:0", 2, `host b: slots must be a positive integer, got "0"`},
		{"a:", 1, `host a: slots must be a positive integer, got ""`},
		{"a:2 b", 1, `unexpected "b" after a:2 (want host or host:N)`},
		{"a slots=2", 1, `unexpected "slots=2" after a (want host or host:N)`},
		{"fe80::1", 1, `IPv6 addresses are not supported here ("fe80::1")`},
		{"a:1:2", 1, `IPv6 addresses are not supported here ("a:1:2")`},
		{"u@a:2", 1, `user names are not supported here ("u@a:2")`},
		{"a:40000\na:40000", 2, "host a: slots add up to more than 65536"},
	}
	for _, tt := range tests {
		_, err := Parse("h", strings.NewReader(tt.in), MPICH)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != tt.line || pe.Msg != tt.msg {
			t.Errorf("Parse(%q) error = %v, want h:%d: %s", tt.in, err, tt.line, tt.msg)
		}
	}
}
