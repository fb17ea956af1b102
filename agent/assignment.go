package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"

	"google.golang.org/protobuf/proto"
)

// Bounds on the strings of an assignment that become part of a worker's
// environment, far below the kernel's 128 KiB per string.
const maxAssignmentString = 4096

// safeChars is the alphabet of a job or round ID, which names files and
// directories on this node. The length is checked apart (isSafeName): a
// counted repetition compiles to a program that long, built at start-up.
var safeChars = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func isSafeName(s string) bool { return len(s) <= 128 && safeChars.MatchString(s) }

// checkAssignment says what does not add up in an assignment, if anything.
// Nothing an agent receives is trusted to be consistent: a store of another
// version, or a bug, must fail the job with a message that names the
// problem, and never panic the agent, which would take every worker of
// every job on the node with it.
func checkAssignment(asg *musterv1.Assignment) error {
	if asg == nil {
		return errors.New("no assignment")
	}
	if !isSafeName(asg.GetJobId()) {
		return fmt.Errorf("job ID %q is not a name of letters, digits, '.', '_' and '-'", asg.GetJobId())
	}
	if !isSafeName(asg.GetRoundId()) {
		return fmt.Errorf("round ID %q is not a name of letters, digits, '.', '_' and '-'", asg.GetRoundId())
	}
	if asg.GetSpec() == nil {
		return errors.New("no job spec")
	}
	// The spec's own rules, as the store checked them; the counts below are
	// checked against the spec with its defaults, filled in on a copy.
	if err := jobspec.Validate(asg.GetSpec()); err != nil {
		return fmt.Errorf("job spec: %w", err)
	}
	spec := proto.Clone(asg.GetSpec()).(*musterv1.JobSpec)
	jobspec.Defaults(spec)
	nnodes, rank, nproc := asg.GetNnodes(), asg.GetNodeRank(), asg.GetNproc()
	// A large job's roster goes to node rank 0 only; the lists are then empty.
	rostered := len(asg.GetNodeAddrs())+len(asg.GetNodeNames())+len(asg.GetNodeSlots()) > 0
	switch {
	case nnodes < 1 || nnodes > jobspec.MaxNodes:
		return fmt.Errorf("%d nodes, outside 1..%d", nnodes, jobspec.MaxNodes)
	case rank < 0 || rank >= nnodes:
		return fmt.Errorf("node rank %d is outside 0..%d for %d nodes", rank, nnodes-1, nnodes)
	case !rostered && (rank == 0 || nnodes <= jobspec.RosterInlineNodes):
		return fmt.Errorf("no node list, which node rank 0 and every node of a job of up to %d nodes get", jobspec.RosterInlineNodes)
	case rostered && (len(asg.GetNodeAddrs()) != int(nnodes) || len(asg.GetNodeNames()) != int(nnodes) || len(asg.GetNodeSlots()) != int(nnodes)):
		return fmt.Errorf("node lists of different lengths: %d nodes, %d addresses, %d names, %d slot counts",
			nnodes, len(asg.GetNodeAddrs()), len(asg.GetNodeNames()), len(asg.GetNodeSlots()))
	case nproc < 1 || nproc > jobspec.MaxNProc:
		return fmt.Errorf("%d workers per node, outside 1..%d", nproc, jobspec.MaxNProc)
	case nproc != jobspec.WorkersPerNode(spec):
		return fmt.Errorf("%d workers per node, but the job spec asks for %d", nproc, jobspec.WorkersPerNode(spec))
	case int64(asg.GetWorldSize()) != int64(nnodes)*int64(nproc):
		return fmt.Errorf("world size %d is not %d nodes times %d workers", asg.GetWorldSize(), nnodes, nproc)
	case len(asg.GetGpus()) != int(spec.GetGpus()):
		return fmt.Errorf("%d GPUs on this node, but the job spec asks for %d", len(asg.GetGpus()), spec.GetGpus())
	case len(asg.GetNcclUniqueId()) != uniqueid.Bytes:
		return fmt.Errorf("NCCL unique ID is %d bytes, want %d", len(asg.GetNcclUniqueId()), uniqueid.Bytes)
	case asg.GetMasterPort() < 1 || asg.GetMasterPort() > 65535:
		return fmt.Errorf("master port %d is outside 1..65535", asg.GetMasterPort())
	case asg.GetRestartCount() < 0 || asg.GetMaxRestarts() < 0:
		return fmt.Errorf("restart count %d or most restarts %d is negative", asg.GetRestartCount(), asg.GetMaxRestarts())
	}
	seen := map[int32]bool{}
	for _, g := range asg.GetGpus() {
		if g < 0 || seen[g] {
			return fmt.Errorf("GPU index %d is negative or repeated", g)
		}
		seen[g] = true
	}
	var slots int64
	for i, addr := range asg.GetNodeAddrs() {
		if _, err := netip.ParseAddr(addr); err != nil {
			return fmt.Errorf("node rank %d's address %q is not an IP address", i, addr)
		}
		n := asg.GetNodeSlots()[i]
		if n < 1 || n > jobspec.MaxNProc {
			return fmt.Errorf("node rank %d has %d slots, outside 1..%d", i, n, jobspec.MaxNProc)
		}
		slots += int64(n)
	}
	switch {
	case !rostered:
		if _, err := netip.ParseAddr(asg.GetMasterAddr()); err != nil {
			return fmt.Errorf("master address %q is not an IP address", asg.GetMasterAddr())
		}
	case slots != int64(asg.GetWorldSize()):
		return fmt.Errorf("the nodes' slots add up to %d, not the world size %d", slots, asg.GetWorldSize())
	case asg.GetNodeSlots()[rank] != nproc:
		return fmt.Errorf("this node (node rank %d) has %d slots, but %d workers", rank, asg.GetNodeSlots()[rank], nproc)
	case asg.GetMasterAddr() != asg.GetNodeAddrs()[0]:
		return fmt.Errorf("master address %q is not node rank 0's address %q", asg.GetMasterAddr(), asg.GetNodeAddrs()[0])
	}
	if id := asg.GetNcclCommId(); id != "" {
		host, port, err := net.SplitHostPort(id)
		if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 1 || p > 65535 || host != asg.GetMasterAddr() {
			return fmt.Errorf("NCCL bootstrap root %q is not the master address with a port", id)
		}
	}
	for _, s := range []struct{ what, v string }{{"job credential", asg.GetJobToken()}, {"store address", asg.GetStoreAddr()}} {
		if len(s.v) > maxAssignmentString || strings.IndexByte(s.v, 0) >= 0 {
			return fmt.Errorf("%s is longer than %d bytes or holds a NUL byte", s.what, maxAssignmentString)
		}
	}
	return nil
}

// unplannedWorkers are the local workers of an assignment that could not be
// planned: each is reported as failed to start, so that the job ends. Their
// ranks are what the assignment says, within bounds whatever it says.
func unplannedWorkers(asg *musterv1.Assignment) []workerPlan {
	nproc := asg.GetNproc()
	if nproc < 1 || nproc > jobspec.MaxNProc {
		nproc = 1
	}
	rank := min(max(asg.GetNodeRank(), 0), jobspec.MaxNodes-1)
	plans := make([]workerPlan, nproc)
	for l := range plans {
		plans[l] = workerPlan{rank: jobspec.GlobalRank(int(rank), int(nproc), l), localRank: l}
	}
	return plans
}

// hasRoster says whether the assignment carries the job's roster: every
// node's address and slots.
func hasRoster(asg *musterv1.Assignment) bool {
	n := len(asg.GetNodeAddrs())
	return n > 0 && n == int(asg.GetNnodes()) && len(asg.GetNodeSlots()) == n
}
