package fabric

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Path
		err  string // in the error; "" for none
	}{
		{"", nil, ""},
		{"switch=s3", Path{{"switch", "s3"}}, ""},
		{"block=b1,switch=s3", Path{{"block", "b1"}, {"switch", "s3"}}, ""},
		{"fabric=0b1c2d3e-0000-1111-2222-333344445555,clique=7", Path{{"fabric", "0b1c2d3e-0000-1111-2222-333344445555"}, {"clique", "7"}}, ""},
		{"rack=r1.a:2", Path{{"rack", "r1.a:2"}}, ""},
		{"switch", nil, "want NAME=VALUE"},
		{"switch=s1,", nil, "want NAME=VALUE"},
		{"=s1", nil, "level name is empty"},
		{"switch=", nil, "value is empty"},
		{"1st=a", nil, "want a letter first"},
		{"switch=a=b", nil, "none of letters"},
		{"switch=a b", nil, "none of letters"},
		{"switch=a,switch=b", nil, "given twice"},
		{"a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", nil, "9 levels, more than 8"},
		{"switch=" + strings.Repeat("s", 65), nil, "65 bytes, more than 64"},
		{strings.Repeat("n", 65) + "=s1", nil, "65 bytes, more than 64"},
		{strings.Repeat("x", 2000), nil, "more than 8 levels"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("Parse(%.40q): error %v, want %q", tt.in, err, tt.err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Parse(%.40q) = %v, want %v", tt.in, got, tt.want)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("Parse(%.40q).String() = %q", tt.in, got.String())
		}
	}
}

func TestProtoRoundTrip(t *testing.T) {
	p := Path{{"block", "b1"}, {"switch", "s3"}}
	if got := FromProto(p.Proto()); !slices.Equal(got, p) {
		t.Errorf("FromProto(Proto()) = %v, want %v", got, p)
	}
	if FromProto(nil) != nil || Path(nil).Proto() != nil {
		t.Error("no path is not nil")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "block=b1,switch=s3", "switch", "a=1,a=2", "x=" + strings.Repeat("y", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		// What Parse takes, the store takes, and it writes back the same.
		if err := p.Check(); err != nil {
			t.Fatalf("Parse(%q) = %v, which Check refuses: %v", s, p, err)
		}
		if len(p) > MaxLevels || p.String() != s {
			t.Fatalf("Parse(%q) = %v, written %q", s, p, p.String())
		}
	})
}
