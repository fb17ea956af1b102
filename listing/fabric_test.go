package listing

import (
	"bytes"
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A node's fabric path is a field of its object and a column of the wide
// table; a node without one has "" and "-".
func TestNodesFabric(t *testing.T) {
	nodes := []*musterv1.NodeStatus{
		{Node: &musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1, Fabric: []*musterv1.FabricLevel{{Name: "block", Value: "b1"}, {Name: "switch", Value: "s3"}}}},
		{Node: &musterv1.Node{Name: "b", Addr: "10.0.0.2", Rank: -1}},
	}
	for _, f := range []Format{JSON, YAML} {
		var b bytes.Buffer
		if err := WriteNodes(&b, f, Nodes(nodes)); err != nil {
			t.Fatal(err)
		}
		items := decode(t, f, b.Bytes())["items"].([]any)
		for i, want := range []string{"block=b1,switch=s3", ""} {
			if got := fmtAny(items[i].(map[string]any)["fabric"]); got != want {
				t.Errorf("%s: item %d's fabric %q, want %q", f, i, got, want)
			}
		}
	}
	var b bytes.Buffer
	if err := WriteNodes(&b, Wide, Nodes(nodes)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], " FABRIC ") || !strings.Contains(lines[1], " block=b1,switch=s3 ") {
		t.Errorf("wide table:\n%s", b.String())
	}
}

func TestDoctorFabric(t *testing.T) {
	tests := []struct {
		name string
		d    func(*Doctor)
		want string
	}{
		{"none", func(*Doctor) {}, "fabric: none"},
		{"detected", func(d *Doctor) { d.Fabric, d.FabricFrom = "switch0=s1", "scontrol show topology" }, "fabric: switch0=s1 (from scontrol show topology)"},
		{"refused", func(d *Doctor) { d.FabricError = `MUSTER_TOPOLOGY "x": level "x": want NAME=VALUE` }, `fabric: MUSTER_TOPOLOGY "x"`},
	}
	for _, tt := range tests {
		d := NewDoctor()
		tt.d(&d)
		var b bytes.Buffer
		if err := WriteDoctor(&b, Table, d); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("%s: doctor says\n%s\nwant %q", tt.name, b.String(), tt.want)
		}
	}
}
