package cmdline

import (
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/jobspec"
)

func TestCount(t *testing.T) {
	tests := []struct {
		in      string
		want    int32
		wantErr string
	}{
		{"4", 4, ""},
		{"0", 0, ""},
		{"+7", 7, ""},
		{"4096", 4096, ""},
		{"4097", 0, "at most 4096"},
		// 2^32+2 once wrapped around to 2 workers through an int32 cast.
		{"4294967298", 0, "at most 4096"},
		{"99999999999999999999", 0, "at most 4096"},
		{"-1", 0, "at least 0"},
		{"abc", 0, "not a whole number"},
		{"4.0", 0, "not a whole number"},
		{"", 0, "not a whole number"},
		{" 4", 0, "not a whole number"},
	}
	for _, tt := range tests {
		c := NewCount(0, 0, 4096)
		err := c.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Set(%q) = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.Int32() != tt.want || !c.IsSet() {
			t.Errorf("Set(%q) = %d, %v, set %v; want %d", tt.in, c.Int32(), err, c.IsSet(), tt.want)
		}
	}
	if NewCount(1, 1, 2).IsSet() {
		t.Error("a count never set says it was")
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"30", 30 * time.Second, ""}, // as timeout(1): a bare number is seconds
		{"1.5", 1500 * time.Millisecond, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"300ms", 300 * time.Millisecond, ""},
		{"1ms", time.Millisecond, ""},
		{"2m", 2 * time.Minute, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"500us", 0, "below a millisecond"},
		{"0.0001", 0, "below a millisecond"},
		{"1ns", 0, "below a millisecond"},
		{"-5s", 0, "negative"},
		{"-3", 0, "negative"},
		{"5x", 0, "not a duration"},
		{"", 0, "not a duration"},
		{"NaN", 0, "not a duration"},
		{"inf", 0, "not a duration"},
		{"1e300", 0, "too long"},
	}
	for _, tt := range tests {
		d := NewDuration(7 * time.Second)
		err := d.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Set(%q) = %v, want an error with %q", tt.in, err, tt.wantErr)
			}
			if d.Value() != 7*time.Second {
				t.Errorf("Set(%q) failed but changed the value to %s", tt.in, d.Value())
			}
			continue
		}
		if err != nil || d.Value() != tt.want {
			t.Errorf("Set(%q) = %s, %v; want %s", tt.in, d.Value(), err, tt.want)
		}
	}
}

func TestListKeepsValuesAsGiven(t *testing.T) {
	values := []string{"CUDA_VISIBLE_DEVICES=0,1", "NCCL_SOCKET_IFNAME=^docker0,lo", "A=trailing  ", " B=lead", "C=caf\xe9", "D="}
	var l List
	for _, v := range values {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	got := l.Values()
	if len(got) != len(values) {
		t.Fatalf("got %q, want %q", got, values)
	}
	for i := range values {
		if got[i] != values[i] {
			t.Errorf("value %d: %q, want %q", i, got[i], values[i])
		}
	}
}

func TestSignals(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // String() after Set, or "error"
	}{
		{"USR1,USR2", "USR1,USR2"},
		{"SIGUSR1 SIGTERM", "USR1,TERM"},
		{"usr2,usr2", "USR2"},
		{"none", "none"},
		{"", "none"},
		{"KILL", "error"},
		{"STOP", "error"},
		{"TSTP", "error"},
		{"CONT", "error"},
		{"URG", "error"},
		{"USR3", "error"},
		{"9", "error"},
	} {
		s := &Signals{}
		err := s.Set(tc.in)
		got := s.String()
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("Set(%q): %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
}

func FuzzSignals(f *testing.F) {
	for _, s := range []string{"USR1,USR2", "SIGTERM", "none", "x,,y", strings.Repeat("USR1,", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		s := &Signals{}
		if s.Set(list) != nil {
			return
		}
		for _, sig := range s.Values() {
			if !jobspec.MayForward(int32(sig)) {
				t.Fatalf("%q gave %v, which may not be forwarded", list, sig)
			}
		}
		again := &Signals{}
		if err := again.Set(s.String()); err != nil || again.String() != s.String() {
			t.Fatalf("%q: String %q does not parse back: %v", list, s.String(), err)
		}
	})
}
