package rendezvous

import (
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestValidateNode(t *testing.T) {
	tests := []struct {
		node *musterv1.Node
		want string
	}{
		{&musterv1.Node{Name: "gpu-01.example", Addr: "10.0.0.1", Rank: -1}, ""},
		{&musterv1.Node{Name: "", Addr: "10.0.0.1"}, "not a host name"},
		{&musterv1.Node{Name: "a b", Addr: "10.0.0.1"}, "not a host name"},
		{&musterv1.Node{Name: "n", Addr: "n.example"}, "not an IP address"},
		{&musterv1.Node{Name: "n", Addr: "::1", Rank: -2}, "node rank"},
		{&musterv1.Node{Name: "n", Addr: "::1", Gpus: []*musterv1.GPU{{Index: 0}, {Index: 0}}}, "repeated"},
		{&musterv1.Node{Name: "n", Addr: "::1", Topology: &musterv1.NodeTopology{AllowedCpus: "0-63"}}, ""},
		{&musterv1.Node{Name: "n", Addr: "::1", Topology: &musterv1.NodeTopology{Notes: []string{strings.Repeat("x", 1<<16)}}}, "topology of"},
	}
	for _, tt := range tests {
		err := validateNode(tt.node)
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("validateNode(%v) = %v, want %q", tt.node, err, tt.want)
		}
	}
}
