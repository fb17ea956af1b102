package hostfile

import (
	"reflect"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		// Forms from Slurm's documentation of hostlists.
		{"tux[1-3]", []string{"tux1", "tux2", "tux3"}},
		{"linux[0-2,8]", []string{"linux0", "linux1", "linux2", "linux8"}},
		{"lx[10-12],lx15", []string{"lx10", "lx11", "lx12", "lx15"}},
		{"node[001-003]", []string{"node001", "node002", "node003"}},
		{"n[1-3,7,10-11]", []string{"n1", "n2", "n3", "n7", "n10", "n11"}},
		{"n[9-10]", []string{"n9", "n10"}},
		{"n[08-10]", []string{"n08", "n09", "n10"}},
		{"n[098-100]", []string{"n098", "n099", "n100"}},
		{"n[01-1]", []string{"n01"}},
		{"rack[1-2]-node[01-02]", []string{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
		{"n[1-2].ib", []string{"n1.ib", "n2.ib"}},
		{"n[1-2].ib,gpu[3],login", []string{"n1.ib", "n2.ib", "gpu3", "login"}},
		{"a b\tc,,d", []string{"a", "b", "c", "d"}},
		{"[1-2]", []string{"1", "2"}},
		{"n[1]a[2]", []string{"n1a2"}},
		{"n1,n1", []string{"n1", "n1"}},
		{"", nil},
	}
	for _, tt := range tests {
		got, err := Expand(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestExpandErrors(t *testing.T) {
	tests := []struct{ in, msg string }{
		{"n[1-[2]]", "nested '['"},
		{"n[1-3", "missing ']'"},
		{"n1-3]", "']' without '['"},
		{"n[3-1]", `range "3-1" runs backwards (3 > 1)`},
		{"n[]", "empty brackets"},
		{"n[1,]", `want digits, got ""`},
		{"n[1-]", `want digits, got ""`},
		{"n[a-b]", `want digits, got "a"`},
		{"n[1-2-3]", `want digits, got "2-3"`},
		{"n[ 1]", `want digits, got " 1"`},
		{"n[1234567890123456789]", "longer than 18 digits"},
		{"n[0-1048576]", "hold more than 1048576 numbers"},
		{"a[0-1023]b[0-1024]", "expands to more than 1048576 names"},
		{"a[0-1048575],b", "expands to more than 1048576 names"},
		{"-n[1-2]", `invalid host name "-n1"`},
		{"n[1-2]!", `invalid host name "n1!"`},
		{"n[1-2]..x", `invalid host name "n1..x"`},
	}
	for _, tt := range tests {
		_, err := Expand(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Expand(%q) error = %v, want %q", tt.in, err, tt.msg)
		}
	}
}

func TestExpandLimit(t *testing.T) {
	got, err := Expand("a[0-1023]b[0-1023]")
	if err != nil || len(got) != MaxHosts || got[MaxHosts-1] != "a1023b1023" {
		t.Fatalf("Expand at the limit: %d names, %v", len(got), err)
	}
}

func TestCompress(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"tux1", "tux2", "tux3"}, "tux[1-3]"},
		{[]string{"n1", "n2", "n3", "n5"}, "n[1-3,5]"},
		{[]string{"node001", "node002", "node003"}, "node[001-003]"},
		{[]string{"n09", "n10"}, "n[09-10]"},
		{[]string{"n9", "n10"}, "n[9-10]"},
		{[]string{"n1", "n01", "n2"}, "n[1,01,2]"},
		{[]string{"n1.ib", "n2.ib", "n1.eth"}, "n[1-2].ib,n1.eth"},
		{[]string{"rack1-node01", "rack1-node02", "rack2-node01"}, "rack1-node[01-02],rack2-node01"},
		{[]string{"n3", "n1", "n2"}, "n[3,1-2]"},
		{[]string{"n1", "n1"}, "n[1,1]"},
		{[]string{"login", "n1", "n2", "login"}, "login,n[1-2],login"},
		{[]string{"10.0.0.1", "10.0.0.2"}, "10.0.0.[1-2]"},
		{[]string{"fe80::1"}, "fe80::1"},
		{[]string{"n1234567890123456789", "n1234567890123456790"}, "n1234567890123456789,n1234567890123456790"},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := Compress(tt.in); got != tt.want {
			t.Errorf("Compress(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzExpand: no panic, only valid names within the bound, and Compress
// gives a list that expands to the same names.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		"tux[1-3]", "node[001-003],login", "n[1-3,7,10-11]", "rack[1-2]-node[01-02]",
		"n[1-2].ib", "n[9-10]", "n[098-100]", "a b,c", "n[3-1]", "n[1-[2]]", "n[1-3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		names, err := Expand(in)
		if err != nil {
			return
		}
		if len(names) > MaxHosts {
			t.Fatalf("%d names", len(names))
		}
		for _, n := range names {
			if err := checkName(n); err != nil {
				t.Fatalf("Expand(%q) gave %q: %v", in, n, err)
			}
		}
		c := Compress(names)
		again, err := Expand(c)
		if err != nil || !reflect.DeepEqual(again, names) {
			t.Fatalf("Expand(%q) = %q; Compress = %q; expands to %q, %v", in, names, c, again, err)
		}
	})
}

// FuzzCompress: any list of valid names survives Compress then Expand.
func FuzzCompress(f *testing.F) {
	for _, s := range []string{
		"n1 n2 n3 n5", "n09 n10 n1 n01", "a1.ib a2.ib a1.eth", "x y 10.0.0.1 10.0.0.2 fe80::1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var names []string
		for _, n := range strings.Fields(in) {
			if checkName(n) == nil {
				names = append(names, n)
			}
		}
		c := Compress(names)
		got, err := Expand(c)
		if err != nil || len(got) != len(names) || (len(got) > 0 && !reflect.DeepEqual(got, names)) {
			t.Fatalf("Compress(%q) = %q expands to %q, %v", names, c, got, err)
		}
	})
}
