package hostfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseOpenMPI(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Host
	}{
		{
			// The example hostfile of Open MPI's documentation.
			"docs example",
			`# This is an example hostfile.  Comments begin with #.
#
# Since no slots are specified, the number of slots defaults to the
# number of processor cores available on the machine.
foo.example.com

# We want to allow launching a maximum of 2 processes on this host
# (e.g., potentially because it has two processor cores):
bar.example.com slots=2
`,
			[]Host{{Name: "foo.example.com"}, {Name: "bar.example.com", Slots: 2}},
		},
		{
			"docs scheduling example",
			"node0 slots=2 max_slots=20\nnode1 slots=2 max_slots=20\n",
			[]Host{{Name: "node0", Slots: 2, MaxSlots: 20}, {Name: "node1", Slots: 2, MaxSlots: 20}},
		},
		{
			"slot aliases",
			"a cpu=2\nb count=3\nc slots = 4\nd slots= 5 max-slots =6\ne max_slots=7\n",
			[]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 3}, {Name: "c", Slots: 4},
				{Name: "d", Slots: 5, MaxSlots: 6}, {Name: "e", Slots: 7, MaxSlots: 7}},
		},
		{
			"max aliases",
			"a slots_max=2\nb slots-max=2\nc cpu_max=2\nd max-cpu=2\ne count-max=2\nf max_count=2\n",
			[]Host{{Name: "a", Slots: 2, MaxSlots: 2}, {Name: "b", Slots: 2, MaxSlots: 2},
				{Name: "c", Slots: 2, MaxSlots: 2}, {Name: "d", Slots: 2, MaxSlots: 2},
				{Name: "e", Slots: 2, MaxSlots: 2}, {Name: "f", Slots: 2, MaxSlots: 2}},
		},
		{
			"comments",
			"a slots=2 # trailing\n// whole line\nb slots=3 // trailing\n/* block\n c slots=9\n*/ d\ne /* x */\n\t \r\n",
			[]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 3}, {Name: "d"}, {Name: "e"}},
		},
		{
			"users",
			"alice@a slots=2\nb username=bob\nc user-name=carol slots=1\nalice@a\n",
			[]Host{{Name: "a", Slots: 3, User: "alice"}, {Name: "b", User: "bob"}, {Name: "c", Slots: 1, User: "carol"}},
		},
		{
			"repeated hosts add slots up",
			"a\na\nb slots=2\nb slots=3\nc\nc slots=4\nd slots=2 max_slots=4\nd\n",
			[]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 5}, {Name: "c", Slots: 5}, {Name: "d", Slots: 3, MaxSlots: 4}},
		},
		{
			"addresses and topology keys",
			"10.0.0.1 slots=8\nfe80::1 slots=2 sockets=2 cores=16\n",
			[]Host{{Name: "10.0.0.1", Slots: 8}, {Name: "fe80::1", Slots: 2}},
		},
		{"empty", "\n# nothing\n", nil},
	}
	for _, tt := range tests {
		got, err := Parse("h", strings.NewReader(tt.in), OpenMPI)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseOpenMPIErrors(t *testing.T) {
	tests := []struct {
		in   string
		line int
		msg  string
	}{
		{"a slots=x", 1, `slots must be a positive integer, got "x"`},
		{"a\nb slots=0", 2, `slots must be a positive integer, got "0"`},
		{"a slots=-1", 1, `slots must be a positive integer, got "-1"`},
		{"a slots=99999999", 1, "slots must be at most 65536, got 99999999"},
		{"a slots=", 1, "slots= needs a value"},
		{"a slots", 1, `unexpected "slots" after host a (want key=value)`},
		{"a slots=1 slots=2", 1, "slots given twice for host a"},
		{"a slots=4 max_slots=2", 1, "slots=4 exceed max_slots=2 for host a"},
		{"a max_slots=2\na", 2, "host a: slots add up to 3, more than max_slots=2"},
		{"a max_slots=2\na max_slots=3", 2, "host a listed again with max_slots=3, was 2"},
		{"a\nbob@a", 2, `host a listed again with user "bob", was ""`},
		{"a frobs=2", 1, `unknown keyword "frobs"`},
		{"a port=22", 1, "port= is not supported"},
		{"a b", 1, `unexpected "b" after host a (want key=value)`},
		{"slots=2", 1, `line starts with "slots", not a host name`},
		{"^a", 1, `excluded hosts ("^a") are not supported`},
		{"+n1", 1, `relative hosts ("+n1") are not supported`},
		{"a slots=2 =3", 1, "unexpected '=' after host a"},
		{"bad_host!", 1, `invalid host name "bad_host!"`},
		{"x@y@a", 1, `invalid host name "y@a"`},
		{"a\n/* open\n\n", 2, "unterminated /* comment"},
		{"a\n" + strings.Repeat("x", MaxLineLen+1), 2, "line longer than 4096 bytes"},
		{"a\n\xff", 2, "line is not valid UTF-8"},
		{"a username=b@c", 1, `invalid user name "b@c"`},
		{"a@b username=c", 1, `host b names two users, "a" and "c"`},
	}
	for _, tt := range tests {
		_, err := Parse("h", strings.NewReader(tt.in), OpenMPI)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != tt.line || pe.Msg != tt.msg {
			t.Errorf("Parse(%.40q) error = %v, want h:%d: %s", tt.in, err, tt.line, tt.msg)
		}
	}
}
