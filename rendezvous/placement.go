package rendezvous

import (
	"cmp"
	"slices"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// placement is where a job's rounds may take nodes from: the spec's hosts,
// in node rank order, less its excluded nodes. A host or an excluded entry
// matches a node by name or by address. It is built once per job, so that
// counting ready nodes stays one pass over the nodes.
type placement struct {
	spec    *musterv1.JobSpec
	listed  map[string]bool // the spec's hosts; empty: every node is a candidate
	exclude map[string]bool
	// unhealthy are the nodes, by name, that failed a health check for the
	// job: its rounds leave them out (health.go).
	unhealthy map[string]*musterv1.NodeHealth
	// schedule is the store's cordons and drains (schedule.go), and ranOn
	// the nodes the job's rounds ran on, which a cordon does not bar it from.
	schedule map[string]musterv1.NodeSchedule
	ranOn    *[]string
}

func newPlacement(spec *musterv1.JobSpec, schedule map[string]musterv1.NodeSchedule, ranOn *[]string) *placement {
	p := &placement{spec: spec, listed: map[string]bool{}, exclude: map[string]bool{}, schedule: schedule, ranOn: ranOn}
	for _, h := range spec.GetHosts() {
		p.listed[h] = true
	}
	for _, h := range spec.GetExclude() {
		p.exclude[h] = true
	}
	return p
}

// placementOf is j's placement, built on first use: a job a restarted store
// took over gets one too.
func (s *Store) placementOf(j *job) *placement {
	if j.place == nil {
		j.place = newPlacement(j.spec, s.schedule, &j.ranOn)
	}
	return j.place
}

func (p *placement) excluded(n *node) bool {
	return p.exclude[n.info.GetName()] || p.exclude[n.info.GetAddr()] || p.unhealthy[n.info.GetName()] != nil
}

// candidate says whether a round of the job may take n at all.
func (p *placement) candidate(n *node) bool {
	if p.excluded(n) || n.leaving || p.barred(n) != "" {
		return false
	}
	return len(p.listed) == 0 || p.listed[n.info.GetName()] || p.listed[n.info.GetAddr()]
}

// countReadyLocked counts the nodes a round of p's job could take now.
func (s *Store) countReadyLocked(p *placement) int {
	count := 0
	for _, n := range s.nodes {
		if p.candidate(n) && ready(n, p.spec) {
			count++
		}
	}
	return count
}

// pickLocked picks p's nodes among those with enough free GPUs, at most
// spec.Nnodes of them, and describes why the nodes passed over could not be
// taken. Without hosts, nodes with an explicit node rank come first, then a
// job without GPUs takes the least loaded nodes and a job with GPUs the
// first in name order; node ranks follow explicit node rank, then fabric
// path, then name. With hosts node rank 0 is the first host taken and the
// others follow the hosts' order, or the fabric's when the nodes give one;
// a listed host that no registered node matches is described too.
func (s *Store) pickLocked(p *placement) (picked []*node, unusable []string) {
	take := func(n *node) bool {
		switch {
		case p.unhealthy[n.info.GetName()] != nil:
			unusable = append(unusable, describeUnhealthy(n.info.GetName(), p.unhealthy[n.info.GetName()]))
		case p.excluded(n):
			unusable = append(unusable, "node "+n.info.GetName()+" is excluded")
		case n.leaving:
			unusable = append(unusable, "node "+n.info.GetName()+" is leaving")
		case p.barred(n) != "":
			unusable = append(unusable, p.barred(n))
		case ready(n, p.spec):
			picked = append(picked, n)
		default:
			unusable = append(unusable, describeGPUs(n, freeGPUs(n)))
		}
		return int32(len(picked)) == p.spec.Nnodes
	}
	if len(p.listed) == 0 {
		nodes := sortedNodes(s.nodes)
		if p.spec.GetGpus() == 0 {
			// Jobs without GPUs spread: the least loaded nodes first. Jobs
			// with GPUs pack in node rank order, which keeps whole nodes
			// free for larger jobs.
			load := s.workersLocked()
			slices.SortStableFunc(nodes, func(a, b *node) int { return compareLoad(a, b, load) })
		}
		for _, n := range nodes {
			if take(n) {
				break
			}
		}
		// Node ranks follow the node order, whichever nodes were taken, and
		// the fabric where the nodes gave their place in it (fabric.go).
		slices.SortFunc(picked, compareRanked)
		return picked, unusable
	}
	// A host matches every node of its name or address; nodes sharing an
	// address keep their usual order.
	matches := map[string][]*node{}
	for _, n := range s.nodes {
		name, addr := n.info.GetName(), n.info.GetAddr()
		if p.listed[name] {
			matches[name] = append(matches[name], n)
		}
		if p.listed[addr] && addr != name {
			matches[addr] = append(matches[addr], n)
		}
	}
	seen := map[*node]bool{}
	for _, h := range p.spec.GetHosts() {
		nodes := matches[h]
		if len(nodes) == 0 {
			unusable = append(unusable, "listed host "+h+" is not registered")
			continue
		}
		slices.SortFunc(nodes, compareNodes)
		for _, n := range nodes {
			if seen[n] {
				continue // listed by name and by address: its first place counts
			}
			seen[n] = true
			if take(n) {
				return orderListed(picked), unusable
			}
		}
	}
	return orderListed(picked), unusable
}

// workersLocked counts, by node, the workers of the rounds running on it.
func (s *Store) workersLocked() map[*node]int64 {
	load := map[*node]int64{}
	for _, n := range s.nodes {
		for id := range n.jobs {
			if j := s.jobs[id]; j != nil && j.round != nil {
				load[n] += int64(j.round.nproc)
			}
		}
	}
	return load
}

// compareLoad orders nodes for a job without GPUs: explicit node ranks
// first, as rounds rank them; then by workers per CPU, so that a node with
// more CPUs takes more workers; then in name order. A node that reports no
// CPU count counts as one CPU.
func compareLoad(a, b *node, load map[*node]int64) int {
	ra, rb := a.info.GetRank() >= 0, b.info.GetRank() >= 0
	if ra || rb {
		return compareNodes(a, b)
	}
	ca, cb := max(int64(a.info.GetCpus()), 1), max(int64(b.info.GetCpus()), 1)
	if c := cmp.Compare(load[a]*cb, load[b]*ca); c != 0 {
		return c
	}
	return compareNodes(a, b)
}
