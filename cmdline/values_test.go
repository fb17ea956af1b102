package cmdline

import (
	"fmt"
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

func TestNodeRange(t *testing.T) {
	tests := []struct {
		in          string
		most, least int32
		wantErr     string
	}{
		{"3", 3, 0, ""},
		{"2:3", 3, 2, ""},
		{"1:1", 1, 1, ""},
		{"3:3", 3, 3, ""},
		{"10000", 10000, 0, ""},
		{"10001", 0, 0, "at most 10000"},
		{"1:10001", 0, 0, "at most 10000"},
		{"99999999999999999999", 0, 0, "at most 10000"},
		{"0", 0, 0, "at least 1"},
		{"0:3", 0, 0, "at least 1"},
		{"3:2", 0, 0, "MIN:MAX with MIN 3 above MAX 2"},
		{"2:", 0, 0, `"" is not a whole number: want N or MIN:MAX`},
		{":3", 0, 0, `"" is not a whole number: want N or MIN:MAX`},
		{"2:3:4", 0, 0, `"3:4" is not a whole number: want N or MIN:MAX`},
		{"two", 0, 0, `"two" is not a whole number: want N or MIN:MAX`},
	}
	for _, tt := range tests {
		r := NewNodeRange(1, 10000)
		err := r.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Set(%q) = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || r.Most() != tt.most || r.Least() != tt.least || !r.IsSet() {
			t.Errorf("Set(%q) = %d:%d, %v; want %d:%d", tt.in, r.Least(), r.Most(), err, tt.least, tt.most)
		}
		if r.String() != tt.in {
			t.Errorf("Set(%q).String() = %q", tt.in, r.String())
		}
	}
}

func FuzzParseNodeRange(f *testing.F) {
	for _, s := range []string{"1", "2:3", "0:0", "3:2", "-1:2", "1:99999999999999999999", ":", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		most, least, err := ParseNodeRange(s, 10000)
		if err != nil {
			return
		}
		if most < 1 || most > 10000 || least < 0 || least > most {
			t.Fatalf("ParseNodeRange(%q) = %d, %d: out of bounds", s, most, least)
		}
		if (least > 0) != strings.Contains(s, ":") {
			t.Fatalf("ParseNodeRange(%q) = %d, %d: elastic without a colon or the reverse", s, most, least)
		}
	})
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		in      []string
		want    string
		wantErr string
	}{
		{[]string{"93"}, "93", ""},
		{[]string{"93, 94"}, "93,94", ""},
		{[]string{"93", "1"}, "93,1", ""},
		{[]string{"0"}, "", `"0" is not an exit code in 1..255`},
		{[]string{"256"}, "", `"256" is not an exit code in 1..255`},
		{[]string{"93,"}, "", `"" is not an exit code in 1..255`},
		{[]string{"x"}, "", `"x" is not an exit code in 1..255`},
	}
	for _, tt := range tests {
		var e ExitCodes
		var err error
		for _, v := range tt.in {
			if err = e.Set(v); err != nil {
				break
			}
		}
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Set(%q) = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || e.String() != tt.want {
			t.Errorf("Set(%q) = %q, %v; want %q", tt.in, e.String(), err, tt.want)
		}
	}
}

func FuzzParseExitCodes(f *testing.F) {
	for _, s := range []string{"93", "1,2,255", "0", "256", ",", " 7 ", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		codes, err := ParseExitCodes(s)
		if err != nil {
			return
		}
		if len(codes) != strings.Count(s, ",")+1 {
			t.Fatalf("ParseExitCodes(%q) = %v: not one code per entry", s, codes)
		}
		for _, c := range codes {
			if c < 1 || c > 255 {
				t.Fatalf("ParseExitCodes(%q) = %v: out of 1..255", s, codes)
			}
		}
	})
}

func TestSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"64M", 64 << 20, ""},
		{"64m", 64 << 20, ""},
		{"512MiB", 512 << 20, ""},
		{"2G", 2 << 30, ""},
		{"2gb", 2 << 30, ""},
		{"1T", 1 << 40, ""},
		{"10k", 10 << 10, ""},
		{"100b", 100, ""},
		{"8589934592G", 0, "too large"},
		{"99999999999999999999", 0, "too large"},
		{"-1M", 0, "negative"},
		{"M", 0, "not a size: give bytes, or a number with K, M, G or T (512M, 2G)"},
		{"1.5G", 0, "not a size: give bytes, or a number with K, M, G or T (512M, 2G)"},
		{"64 M", 0, "not a size: give bytes, or a number with K, M, G or T (512M, 2G)"},
		{"+64M", 0, "not a size: give bytes, or a number with K, M, G or T (512M, 2G)"},
		{"", 0, "not a size: give bytes, or a number with K, M, G or T (512M, 2G)"},
	}
	for _, tt := range tests {
		var z Size
		err := z.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Set(%q) = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || z.Bytes() != tt.want {
			t.Errorf("Set(%q) = %d, %v; want %d", tt.in, z.Bytes(), err, tt.want)
		}
	}
}

func FuzzSize(f *testing.F) {
	for _, s := range []string{"64M", "2GiB", "0", "-1", "9223372036854775807", "8589934592G", "kb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var z Size
		if z.Set(s) == nil && z.Bytes() < 0 {
			t.Fatalf("%q: %d bytes", s, z.Bytes())
		}
	})
}

func TestRanks(t *testing.T) {
	tests := []struct {
		in            string
		in0, in3, in7 bool
		wantErr       string
	}{
		{"0", true, false, false, ""},
		{"0,2-5", true, true, false, ""},
		{"7,3", false, true, true, ""},
		{"3-3", false, true, false, ""},
		{"5-2", false, false, false, "a range goes from the lower rank to the higher"},
		{"0,5-2", false, false, false, "5-2: a range goes from the lower rank to the higher"},
		{"", false, false, false, `"" is not a rank: give ranks and ranges such as 0,2-5`},
		{"0,", false, false, false, `"" is not a rank: give ranks and ranges such as 0,2-5`},
		{"-1", false, false, false, `"-1" is neither a rank nor a range: give ranks and ranges such as 0,2-5`},
		{"0-", false, false, false, `"0-" is neither a rank nor a range: give ranks and ranges such as 0,2-5`},
		{"a", false, false, false, `"a" is not a rank: give ranks and ranges such as 0,2-5`},
		{"1-2-3", false, false, false, `"2-3" is not a rank: give ranks and ranges such as 0,2-5`},
		{"99999999999", false, false, false, `"99999999999" is not a rank: give ranks and ranges such as 0,2-5`},
	}
	for _, tt := range tests {
		var r Ranks
		err := r.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Set(%q) = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || r.Contains(0) != tt.in0 || r.Contains(3) != tt.in3 || r.Contains(7) != tt.in7 {
			t.Errorf("Set(%q): %v, contains 0 %v, 3 %v, 7 %v", tt.in, err, r.Contains(0), r.Contains(3), r.Contains(7))
		}
	}
	for _, tt := range []struct {
		in    string
		world int64
		want  bool
	}{{"0", 1, true}, {"7", 2, false}, {"7,1", 2, true}, {"2-9", 2, false}, {"2-9", 3, true}} {
		var r Ranks
		if err := r.Set(tt.in); err != nil || r.Below(tt.world) != tt.want {
			t.Errorf("%q below %d: %v, want %v (%v)", tt.in, tt.world, r.Below(tt.world), tt.want, err)
		}
	}
	var all Ranks
	if !all.Contains(12) || all.IsSet() || !all.Below(1) {
		t.Error("an empty set does not hold every rank")
	}
	if err := all.Set(strings.Repeat("1,", maxRankSpans) + "1"); err == nil {
		t.Error("an unbounded list was taken")
	}
}

func FuzzRanks(f *testing.F) {
	for _, s := range []string{"0", "0,2-5", "5-2", "", "1-2-3", "2147483647"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var r Ranks
		if r.Set(s) != nil {
			return
		}
		for _, sp := range r.spans {
			if sp[0] < 0 || sp[1] < sp[0] || !r.Contains(sp[0]) || !r.Contains(sp[1]) {
				t.Fatalf("%q: span %v", s, sp)
			}
		}
	})
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

func TestChoice(t *testing.T) {
	parse := func(s string) (string, error) {
		switch s {
		case "a", "alpha":
			return "a", nil
		}
		return "", fmt.Errorf("%q: want a", s)
	}
	c := NewChoice("none", parse)
	if c.String() != "none" {
		t.Errorf("default %q", c)
	}
	if err := c.Set("alpha"); err != nil || c.String() != "a" {
		t.Errorf("Set(alpha): %q, %v", c, err)
	}
	if err := c.Set("b"); err == nil || c.String() != "a" {
		t.Errorf("Set(b): %q, %v; want an error and the value kept", c, err)
	}
	if err := c.Set("a"); err != nil || c.String() != "a" {
		t.Errorf("Set(a) again, by another name: %q, %v; want it taken", c, err)
	}
	if err := NewChoice("none", parse).Set("a"); err != nil {
		t.Fatal(err)
	}
	twice := NewChoice("none", parse)
	if err := twice.Set("alpha"); err != nil {
		t.Fatal(err)
	}
	if err := twice.Set("none"); err == nil || twice.String() != "a" {
		t.Errorf("a second, other value: %q, %v; want an error and the first kept", twice, err)
	}
	// The environment's value is applied first and gives way to the command line's.
	t.Setenv("CHOICE_TEST", "alpha")
	env := NewChoice("none", func(s string) (string, error) { return s, nil }).ReadsEnv("CHOICE_TEST")
	for _, s := range []string{"alpha", "beta"} {
		if err := env.Set(s); err != nil {
			t.Fatalf("Set(%s): %v", s, err)
		}
	}
	if env.String() != "beta" {
		t.Errorf("the command line's value after the environment's: %q, want beta", env)
	}
}
