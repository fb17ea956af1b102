package hostfile

import (
	"strings"
	"testing"
)

func TestEmit(t *testing.T) {
	hosts := []Host{
		{Name: "a", Slots: 2, MaxSlots: 4, User: "alice"},
		{Name: "b", Slots: 8},
		{Name: "10.0.0.3"},
	}
	tests := []struct {
		format Format
		hosts  []Host
		want   string
		err    string
	}{
		{OpenMPI, hosts, "alice@a slots=2 max_slots=4\nb slots=8\n10.0.0.3\n", ""},
		{MPICH, hosts[1:], "b:8\n10.0.0.3\n", ""},
		{MPICH, hosts[:1], "", "cannot name a user"},
		{MPICH, []Host{{Name: "fe80::1", Slots: 2}}, "", "IPv6"},
		{DeepSpeed, hosts[1:2], "b slots=8\n", ""},
		{DeepSpeed, hosts[1:], "", "need a slot count (host 10.0.0.3)"},
		{DeepSpeed, []Host{{Name: "b", Slots: 1}, {Name: "b", Slots: 1}}, "", "list a host once"},
		{OpenMPI, []Host{{Name: "a\nb", Slots: 1}}, "", "invalid host name"},
		{OpenMPI, []Host{{Name: "a", Slots: -1}}, "", "out of range"},
		{OpenMPI, []Host{{Name: "a", Slots: 3, MaxSlots: 2}}, "", "exceed max_slots"},
		{OpenMPI, []Host{{Name: "a", User: "x y"}}, "", "invalid user name"},
		{"slurm", hosts, "", "unknown format"},
	}
	for _, tt := range tests {
		var b strings.Builder
		err := Emit(&b, tt.format, tt.hosts)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Emit(%s, %v) error = %v, want %q", tt.format, tt.hosts, err, tt.err)
			}
			continue
		}
		if err != nil || b.String() != tt.want {
			t.Errorf("Emit(%s, %v) = %q, %v; want %q", tt.format, tt.hosts, b.String(), err, tt.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"node01", true},
		{"node01.cluster.example.com", true},
		{"gpu_node-3", true},
		{"10.1.2.3", true},
		{"fe80::1", true},
		{"2001:db8::8a2e:370:7334", true},
		{"123", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a.", 126) + "a", true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("a.", 127) + "a", false},
		{"-node", false},
		{"node-", false},
		{"a..b", false},
		{"node.", false},
		{"no de", false},
		{"node[1]", false},
		{"node,1", false},
		{"user@node", false},
		{"fe80::1%eth0", false},
		{"a:b", false},
		{"nöde", false},
	}
	for _, tt := range tests {
		if err := checkName(tt.name); (err == nil) != tt.ok {
			t.Errorf("checkName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestParseErrorNamesFileAndLine(t *testing.T) {
	_, err := Parse("hosts.txt", strings.NewReader("a slots=1\nb slots=2\nc slots=x\n"), OpenMPI)
	want := `hosts.txt:3: slots must be a positive integer, got "x"`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
}
