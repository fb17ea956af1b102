package rendezvous

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/engine"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// RosterInlineNodes is the most nodes a job may have for every node's
// assignment to carry the roster; beyond it only node rank 0's does.
const RosterInlineNodes = 64

// RosterKey is the key in a job's KV that holds its nodes' addresses, space
// separated by node rank, for workers on nodes whose assignment has no roster.
const RosterKey = "muster/node_addrs"

// round fixes a job's nodes, node ranks, GPUs and world size.
type round struct {
	id        string
	nodes     []*node         // by node rank
	rank      map[*node]int32 // node rank by node
	gpus      [][]int32       // by node rank
	nproc     int32
	worldSize int32
}

// formRoundLocked picks the job's nodes in stable order (explicit node rank,
// then name) among those with enough free GPUs, and takes their GPUs.
func (s *Store) formRoundLocked(j *job) (*round, error) {
	spec := j.spec
	nodes := sortedNodes(s.nodes)
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no agent is registered with the store")
	}
	var picked []*node
	var short []string
	for _, n := range nodes {
		free := freeGPUs(n)
		if int32(len(free)) >= spec.Gpus {
			picked = append(picked, n)
		} else {
			short = append(short, describeGPUs(n, free))
		}
		if int32(len(picked)) == spec.Nnodes {
			break
		}
	}
	if int32(len(picked)) < spec.Nnodes {
		if spec.Gpus > 0 && len(short) > 0 {
			return nil, fmt.Errorf("--gpus %d: %s", spec.Gpus, strings.Join(short, "; "))
		}
		return nil, fmt.Errorf("--nnodes %d: only %d node(s) registered with enough free GPUs", spec.Nnodes, len(picked))
	}
	r := &round{id: j.id + "-r0", nodes: picked, rank: make(map[*node]int32, len(picked)),
		nproc: spec.Nproc, worldSize: spec.Nnodes * spec.Nproc}
	for i, n := range picked {
		r.rank[n] = int32(i)
		g := freeGPUs(n)[:spec.Gpus]
		for _, idx := range g {
			n.busy[idx] = j.id
		}
		n.jobs[j.id] = true
		r.gpus = append(r.gpus, g)
	}
	return r, nil
}

func describeGPUs(n *node, free []int32) string {
	all := n.info.GetGpus()
	if len(all) == 0 {
		why := ""
		if e := n.info.GetGpuError(); e != "" {
			why = " (" + e + ")"
		}
		return fmt.Sprintf("node %s has no GPUs%s; use --nproc N to run workers without GPUs", n.info.GetName(), why)
	}
	var names []string
	for _, g := range all {
		names = append(names, fmt.Sprintf("%d: %s", g.GetIndex(), g.GetName()))
	}
	return fmt.Sprintf("node %s has %d GPUs (%s), %d free", n.info.GetName(), len(all), strings.Join(names, ", "), len(free))
}

func freeGPUs(n *node) []int32 {
	var free []int32
	for _, g := range n.info.GetGpus() {
		if _, busy := n.busy[g.GetIndex()]; !busy {
			free = append(free, g.GetIndex())
		}
	}
	return free
}

// PortsReserved completes a round with the ports node rank 0 reserved: it
// mints the NCCL unique ID and sends every node its assignment.
func (s *Store) PortsReserved(session, roundID string, ports []int32, errText string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobByRoundLocked(roundID)
	if j == nil || j.state != musterv1.JobState_JOB_STATE_PENDING {
		return fmt.Errorf("round %q: %w or not waiting for ports", roundID, ErrNotFound)
	}
	r := j.round
	if r.nodes[0].session != session {
		return fmt.Errorf("round %q: ports must come from node rank 0", roundID)
	}
	if errText == "" && (len(ports) != 2 || !validPort(ports[0]) || !validPort(ports[1])) {
		errText = fmt.Sprintf("agent returned ports %v, want two in 1..65535", ports)
	}
	if errText != "" {
		j.reason = "could not reserve ports on node " + r.nodes[0].info.GetName() + ": " + errText
		j.code = 1
		s.finishLocked(j)
		return nil
	}
	master := r.nodes[0].info.GetAddr()
	root := netip.AddrPortFrom(netip.MustParseAddr(master), uint16(ports[1]))
	id, err := engine.NewUniqueID(root)
	if err != nil {
		return err
	}
	spec := j.spec
	// The roster (every node's address, name and slots) is built once. A
	// small job's assignments all carry it; a larger job's only node rank
	// 0's, where launchers that read a hostfile run: every other node's
	// assignment stays the same size whatever the number of nodes. Workers
	// anywhere read the addresses from their job's KV (RosterKey).
	addrs := make([]string, len(r.nodes))
	names := make([]string, len(r.nodes))
	slots := make([]int32, len(r.nodes))
	for i, n := range r.nodes {
		addrs[i], names[i], slots[i] = n.info.GetAddr(), n.info.GetName(), r.nproc
	}
	if _, err := s.kv.Set(j.id, RosterKey, []byte(strings.Join(addrs, " "))); err != nil {
		s.log.Warn("job roster not kept in its KV", zap.String("job", j.id), zap.Error(err))
	}
	commID := net.JoinHostPort(master, strconv.Itoa(int(ports[1])))
	for rank, n := range r.nodes {
		asg := &musterv1.Assignment{
			JobId:        j.id,
			RoundId:      r.id,
			Spec:         spec,
			NodeRank:     int32(rank),
			Nnodes:       int32(len(r.nodes)),
			Gpus:         r.gpus[rank],
			Nproc:        r.nproc,
			WorldSize:    r.worldSize,
			MasterAddr:   master,
			MasterPort:   ports[0],
			NcclCommId:   commID,
			NcclUniqueId: id[:],
			StoreAddr:    s.cfg.Addr,
			RunAs:        j.owner,
			JobToken:     j.token,
		}
		if rank == 0 || len(r.nodes) <= RosterInlineNodes {
			asg.NodeAddrs, asg.NodeNames, asg.NodeSlots = addrs, names, slots
		}
		s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Start{Start: asg}})
	}
	j.state = musterv1.JobState_JOB_STATE_RUNNING
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_State{State: j.state}})
	if spec.TimeoutMs > 0 {
		d := time.Duration(spec.TimeoutMs) * time.Millisecond
		jobID := j.id
		j.timer = time.AfterFunc(d, func() {
			s.Cancel(jobID, false, fmt.Sprintf("timed out after %s", d), 124)
		})
	}
	return nil
}

func validPort(p int32) bool { return p > 0 && p < 65536 }

func (s *Store) jobByRoundLocked(roundID string) *job {
	id, _, ok := strings.Cut(roundID, "-r")
	if !ok {
		return nil
	}
	if j := s.jobs[id]; j != nil && j.round != nil && j.round.id == roundID {
		return j
	}
	return nil
}
