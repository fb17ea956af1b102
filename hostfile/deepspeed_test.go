package hostfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseDeepSpeed(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Host
	}{
		{
			// The example of DeepSpeed's getting-started guide.
			"docs example", "worker-1 slots=4\nworker-2 slots=4\n",
			[]Host{{Name: "worker-1", Slots: 4}, {Name: "worker-2", Slots: 4}},
		},
		{
			"comments and blanks", "# gpus\n\n  worker-0 slots=16   # eight pairs\n",
			[]Host{{Name: "worker-0", Slots: 16}},
		},
	}
	for _, tt := range tests {
		got, err := Parse("h", strings.NewReader(tt.in), DeepSpeed)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseDeepSpeedErrors(t *testing.T) {
	tests := []struct {
		in   string
		line int
		msg  string
	}{
		{"a slots=1\na slots=2", 2, "host a is listed twice; a DeepSpeed hostfile lists each host once"},
		{"a", 1, `want "host slots=N", got "a"`},
		{"a slots = 2", 1, `want "host slots=N", got "a slots = 2"`},
		{"a max_slots=2", 1, `want "host slots=N", got "a max_slots=2"`},
		{"a slots=0", 1, `slots must be a positive integer, got "0"`},
		{"a slots=2x", 1, `slots must be a positive integer, got "2x"`},
		{"u@a slots=2", 1, `invalid host name "u@a"`},
	}
	for _, tt := range tests {
		_, err := Parse("h", strings.NewReader(tt.in), DeepSpeed)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != tt.line || pe.Msg != tt.msg {
			t.Errorf("Parse(%q) error = %v, want h:%d: %s", tt.in, err, tt.line, tt.msg)
		}
	}
}
