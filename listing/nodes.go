package listing

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/musterhq/muster/fabric"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// NodeList is what `launcher nodes -o json|yaml` writes.
type NodeList struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // NodeList
	Items      []Node `json:"items" yaml:"items"`
}

// Node is one node of a cluster, as its store and gossip know it.
type Node struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // Node
	Name       string `json:"name" yaml:"name"`
	// Address is where its workers are reached (MASTER_ADDR, NCCL's root).
	Address string `json:"address" yaml:"address"`
	// Rank is its explicit node rank; null when nodes are ranked by name.
	Rank *int32 `json:"rank" yaml:"rank"`
	// Gossip is its gossip state (alive, dead, left); "" on a store that
	// takes no part in gossip.
	Gossip string `json:"gossip" yaml:"gossip"`
	// Registered is false for a member gossip knows and the store does not.
	Registered bool `json:"registered" yaml:"registered"`
	// Leaving marks a node whose agent shuts down: no round takes it.
	Leaving bool `json:"leaving" yaml:"leaving"`
	// Schedule is what the operator allows (launcher nodes cordon|drain|
	// uncordon): schedulable, cordoned, draining (drained, jobs still
	// running on it) or drained.
	Schedule   string  `json:"schedule" yaml:"schedule"`
	Version    string  `json:"version" yaml:"version"`
	CPUs       int32   `json:"cpus" yaml:"cpus"`
	GPUs       int     `json:"gpus" yaml:"gpus"`
	FreeGPUs   int     `json:"freeGpus" yaml:"freeGpus"`
	BusyGPUs   []int32 `json:"busyGpus" yaml:"busyGpus"`
	GPUDevices []GPU   `json:"gpuDevices" yaml:"gpuDevices"`
	// GPUError says why no GPUs were found, when discovery failed.
	GPUError string   `json:"gpuError" yaml:"gpuError"`
	Jobs     []string `json:"jobs" yaml:"jobs"`
	// Health is its last health check, made before a round's workers
	// start; null before its first.
	Health *Health `json:"health" yaml:"health"`
	// Topology is its hardware as its agent read it at start; null from
	// an agent that reports none.
	Topology *Topology `json:"topology" yaml:"topology"`
	// Fabric is its place in the network, widest level first
	// (block=b1,switch=s3), by which node ranks are ordered; "" for none.
	Fabric string `json:"fabric" yaml:"fabric"`
}

// Health is a node's health check.
type Health struct {
	OK bool `json:"ok" yaml:"ok"`
	// Check names the checks made when OK, else the one that failed, and
	// Reason why; Job is the job whose round it was made for.
	Check       string `json:"check" yaml:"check"`
	Reason      string `json:"reason" yaml:"reason"`
	Job         string `json:"job" yaml:"job"`
	CheckedTime string `json:"checkedTime" yaml:"checkedTime"`
	checked     time.Time
}

// GPU is one of a node's GPUs.
type GPU struct {
	Index       int32  `json:"index" yaml:"index"`
	UUID        string `json:"uuid" yaml:"uuid"`
	Name        string `json:"name" yaml:"name"`
	MemoryBytes uint64 `json:"memoryBytes" yaml:"memoryBytes"`
}

// Nodes turns the store's answer into the schema.
func Nodes(nodes []*musterv1.NodeStatus) NodeList {
	l := NodeList{APIVersion: APIVersion, Kind: "NodeList", Items: []Node{}}
	for _, n := range nodes {
		info := n.GetNode()
		item := Node{APIVersion: APIVersion, Kind: "Node", Name: info.GetName(), Address: info.GetAddr(),
			Gossip: n.GetGossip(), Registered: !n.GetNotRegistered(), Leaving: n.GetLeaving(),
			Version: info.GetVersion(), CPUs: info.GetCpus(), GPUs: len(info.GetGpus()),
			FreeGPUs: len(info.GetGpus()) - len(n.GetBusyGpus()), BusyGPUs: append([]int32{}, n.GetBusyGpus()...),
			GPUDevices: []GPU{}, GPUError: info.GetGpuError(), Jobs: append([]string{}, n.GetJobs()...),
			Schedule: scheduleName(n.GetSchedule(), len(n.GetJobs())), Topology: TopologyOf(info.GetTopology()),
			Fabric: fabric.FromProto(info.GetFabric()).String()}
		if h := n.GetHealth(); h != nil {
			checked := time.UnixMilli(h.GetCheckedUnixMs())
			item.Health = &Health{OK: h.GetOk(), Check: h.GetCheck(), Reason: h.GetReason(), Job: h.GetJobId(),
				CheckedTime: *Time(h.GetCheckedUnixMs()), checked: checked}
		}
		if r := info.GetRank(); info != nil && r >= 0 {
			item.Rank = &r
		}
		for _, g := range info.GetGpus() {
			item.GPUDevices = append(item.GPUDevices, GPU{Index: g.GetIndex(), UUID: g.GetUuid(), Name: g.GetName(), MemoryBytes: g.GetMemoryBytes()})
		}
		l.Items = append(l.Items, item)
	}
	return l
}

// The operator's schedules of a node, as listed.
const (
	Schedulable = "schedulable"
	Cordoned    = "cordoned"
	Draining    = "draining"
	Drained     = "drained"
)

// scheduleName names a node's schedule; a drained node with jobs still
// running on it is draining.
func scheduleName(s musterv1.NodeSchedule, jobs int) string {
	switch {
	case s == musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED:
		return Cordoned
	case s == musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED && jobs > 0:
		return Draining
	case s == musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED:
		return Drained
	}
	return Schedulable
}

// DescribeSchedule is the line `launcher nodes cordon|drain|uncordon`
// prints for a node: verb is the command's name.
func DescribeSchedule(node, verb string, resp *musterv1.SetNodeScheduleResponse) string {
	jobs := resp.GetJobs()
	switch {
	case verb == "drain" && len(jobs) > 0:
		return fmt.Sprintf("node %s draining: %d job(s) run there still (%s); their next rounds form elsewhere",
			node, len(jobs), strings.Join(jobs, ", "))
	case verb == "uncordon" && resp.GetPrevious() == musterv1.NodeSchedule_NODE_SCHEDULE_UNSPECIFIED:
		return fmt.Sprintf("node %s was neither cordoned nor drained", node)
	}
	return fmt.Sprintf("node %s %sed", node, verb)
}

// State is a node's STATE cell: its gossip state ("-" on a store without
// gossip), marked "leaving" while its agent shuts down, and
// "not-registered" for a member gossip knows that the store does not; then
// "cordoned", "draining" or "drained" when the operator set so.
func (n Node) State() string {
	state := orDash(n.Gossip)
	switch {
	case n.Leaving:
		state += ",leaving"
	case !n.Registered && state == "alive":
		state += ",not-registered"
	}
	if n.Schedule != "" && n.Schedule != Schedulable {
		state += "," + n.Schedule
	}
	return state
}

// WriteNodes writes the nodes in f.
func WriteNodes(w io.Writer, f Format, l NodeList) error {
	if f.Structured() {
		return Write(w, f, l)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	now := time.Now()
	header := "NODE\tADDR\tRANK\tSTATE\tGPUS\tFREE\tJOBS\tHEALTH"
	if f == Wide {
		header += "\tBUSY\tCPUS\tVERSION\tFABRIC\tGPU-NAMES"
	}
	fmt.Fprintln(tw, header)
	for _, n := range l.Items {
		rank := "-"
		if n.Rank != nil {
			rank = fmt.Sprint(*n.Rank)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s", n.Name, n.Address, rank, n.State(), n.GPUs, n.FreeGPUs,
			orDash(strings.Join(n.Jobs, ",")), n.Health.cell(now))
		if f == Wide {
			var busy, names []string
			for _, g := range n.BusyGPUs {
				busy = append(busy, fmt.Sprint(g))
			}
			for _, g := range n.GPUDevices {
				names = append(names, g.Name)
			}
			cpus := "-"
			if n.CPUs > 0 {
				cpus = fmt.Sprint(n.CPUs)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s", orDash(strings.Join(busy, ",")), cpus, orDash(n.Version), orDash(n.Fabric), orDash(strings.Join(names, ",")))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// cell is a node's HEALTH: "-" before its first check, else "ok" or
// "failed", how long ago, and the checks made, or the one that failed and
// why.
func (h *Health) cell(now time.Time) string {
	if h == nil {
		return "-"
	}
	ago := now.Sub(h.checked).Round(time.Second)
	if h.OK {
		return fmt.Sprintf("ok (%s ago): %s", ago, h.Check)
	}
	return fmt.Sprintf("failed (%s ago, job %s): %s: %s", ago, h.Job, h.Check, h.Reason)
}
