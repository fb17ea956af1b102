package rendezvoustest

import (
	"fmt"
	"hash/fnv"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// FabricCluster is n nodes, node1 to nodeN, under switches leaf switches
// in blocks of two: a node's switch is a hash of its name, so that name
// order and switch order disagree, as they do where machines were racked
// as they came. With paths, each node registers its block and switch
// (block=b0,switch=s1); switchOf names every node's switch either way.
func FabricCluster(n, switches int, paths bool) (nodes []*musterv1.Node, switchOf map[string]string) {
	switchOf = map[string]string{}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node%d", i)
		h := fnv.New32a()
		h.Write([]byte(name))
		sw := int(h.Sum32() % uint32(switches))
		switchOf[name] = fmt.Sprintf("s%d", sw)
		node := &musterv1.Node{Name: name, Addr: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Rank: -1, Cpus: 8}
		if paths {
			node.Fabric = []*musterv1.FabricLevel{{Name: "block", Value: fmt.Sprintf("b%d", sw/2)}, {Name: "switch", Value: switchOf[name]}}
		}
		nodes = append(nodes, node)
	}
	return nodes, switchOf
}

// RingCrossings counts the neighbours of a ring of nodes in node rank
// order (node rank i and i+1, the last and the first) that are on
// different switches.
func RingCrossings(ranked []string, switchOf map[string]string) int {
	crossings := 0
	for i, name := range ranked {
		if len(ranked) > 1 && switchOf[name] != switchOf[ranked[(i+1)%len(ranked)]] {
			crossings++
		}
	}
	return crossings
}
