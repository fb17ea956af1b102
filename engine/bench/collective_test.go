package bench

import (
	"math"
	"testing"
)

func TestLayoutAndBandwidth(t *testing.T) {
	const sec = 1e-3
	tests := []struct {
		c            Collective
		bytes        int64
		elt, nranks  int
		want         layout
		algBW, busBW float64 // GB/s at 1 ms
	}{
		{AllReduce, 1 << 20, 4, 8, layout{sendCount: 1 << 18, recvCount: 1 << 18, paramCount: 1 << 18}, 1.048576, 1.048576 * 2 * 7 / 8},
		{AllGather, 1 << 20, 4, 8, layout{sendCount: 1 << 15, recvCount: 1 << 18, paramCount: 1 << 15, sendInPlace: 1 << 15}, 1.048576, 1.048576 * 7 / 8},
		{ReduceScatter, 1 << 20, 4, 8, layout{sendCount: 1 << 18, recvCount: 1 << 15, paramCount: 1 << 15, recvInPlace: 1 << 15}, 1.048576, 1.048576 * 7 / 8},
		{AllToAll, 1 << 20, 4, 8, layout{sendCount: 1 << 18, recvCount: 1 << 18, paramCount: 1 << 15}, 1.048576, 1.048576 * 7 / 8},
		{Broadcast, 1 << 20, 2, 8, layout{sendCount: 1 << 19, recvCount: 1 << 19, paramCount: 1 << 19}, 1.048576, 1.048576},
		{Reduce, 1 << 20, 8, 3, layout{sendCount: 1 << 17, recvCount: 1 << 17, paramCount: 1 << 17}, 1.048576, 1.048576},
		{SendRecv, 1 << 20, 1, 2, layout{sendCount: 1 << 20, recvCount: 1 << 20, paramCount: 1 << 20}, 1.048576, 1.048576},
		// Blocks round down to 16 bytes: 100 floats over 3 ranks is 33, then 32.
		{AllGather, 400, 4, 3, layout{sendCount: 32, recvCount: 96, paramCount: 32, sendInPlace: 32}, 384e-6, 384e-6 * 2 / 3},
		{AllToAll, 8, 4, 2, layout{}, 0, 0},
	}
	for _, tt := range tests {
		got := tt.c.layoutFor(tt.bytes/int64(tt.elt), tt.elt, tt.nranks)
		if got != tt.want {
			t.Errorf("%v %d bytes over %d ranks: layout %+v, want %+v", tt.c, tt.bytes, tt.nranks, got, tt.want)
		}
		alg, bus := tt.c.bandwidth(got.paramCount, tt.elt, tt.nranks, sec)
		if math.Abs(alg-tt.algBW) > 1e-9 || math.Abs(bus-tt.busBW) > 1e-9 {
			t.Errorf("%v: bandwidth %v, %v; want %v, %v", tt.c, alg, bus, tt.algBW, tt.busBW)
		}
	}
}

func TestParseCollectiveNames(t *testing.T) {
	for i, name := range CollectiveNames() {
		c, err := ParseCollective(name)
		if err != nil || c != Collective(i) || c.String() != name {
			t.Errorf("ParseCollective(%q) = %v, %v", name, c, err)
		}
	}
}
