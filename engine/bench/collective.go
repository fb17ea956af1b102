package bench

import (
	"fmt"
	"strings"
)

// Collective is one of the operations the bench measures.
type Collective int

// The collectives, named as on the command line.
const (
	AllReduce Collective = iota
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	SendRecv
)

var collectiveNames = []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv"}

func (c Collective) String() string {
	if int(c) >= 0 && int(c) < len(collectiveNames) {
		return collectiveNames[c]
	}
	return fmt.Sprintf("collective(%d)", int(c))
}

// CollectiveNames lists the names ParseCollective accepts.
func CollectiveNames() []string { return append([]string(nil), collectiveNames...) }

// ParseCollective reads a collective's name; nccl-tests' binary names
// (all_reduce, all_reduce_perf) are accepted too.
func ParseCollective(s string) (Collective, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	n = strings.TrimSuffix(n, "_perf")
	n = strings.ReplaceAll(n, "_", "")
	for i, name := range collectiveNames {
		if n == name {
			return Collective(i), nil
		}
	}
	return 0, fmt.Errorf("unknown collective %q (want one of %s)", s, strings.Join(collectiveNames, ", "))
}

// reduces reports whether the collective takes a reduction operator.
func (c Collective) reduces() bool { return c == AllReduce || c == ReduceScatter || c == Reduce }

// rooted reports whether the collective has a root rank.
func (c Collective) rooted() bool { return c == Broadcast || c == Reduce }

// layout is how a size on the command line maps onto buffers, in elements:
// what each rank sends and receives, the count passed to NCCL, and where the
// in-place input and output sit in the receive buffer, per rank.
type layout struct {
	sendCount, recvCount, paramCount int64
	sendInPlace, recvInPlace         int64 // times the rank
}

// layoutFor splits count elements for a world of nranks the way nccl-tests
// does: gathers and scatters round each rank's block down to 16 bytes, and
// the printed size is the larger of the send and receive buffers.
func (c Collective) layoutFor(count int64, eltSize, nranks int) layout {
	n := int64(nranks)
	block := func() int64 {
		b := count / n
		if align := int64(16 / eltSize); align > 1 {
			b -= b % align
		}
		return b
	}
	switch c {
	case AllGather:
		b := block()
		return layout{sendCount: b, recvCount: b * n, paramCount: b, sendInPlace: b}
	case ReduceScatter:
		b := block()
		return layout{sendCount: b * n, recvCount: b, paramCount: b, recvInPlace: b}
	case AllToAll:
		b := block()
		return layout{sendCount: b * n, recvCount: b * n, paramCount: b}
	}
	return layout{sendCount: count, recvCount: count, paramCount: count}
}

// bandwidth turns one operation's time into algorithm and bus bandwidth in
// GB/s. Bus bandwidth scales algorithm bandwidth by how much each rank's
// links must carry, so numbers compare across world sizes and collectives.
func (c Collective) bandwidth(paramCount int64, eltSize, nranks int, sec float64) (algBW, busBW float64) {
	n := float64(nranks)
	bytes := float64(paramCount) * float64(eltSize)
	factor := 1.0
	switch c {
	case AllReduce:
		factor = 2 * (n - 1) / n
	case AllGather, ReduceScatter, AllToAll:
		bytes *= n // the size is the whole gathered or scattered buffer
		factor = (n - 1) / n
	}
	algBW = bytes / 1e9 / sec
	return algBW, algBW * factor
}
