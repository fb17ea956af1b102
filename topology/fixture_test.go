package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture builds a fake root file system (sys/ and proc/self/) as the
// kernel lays it out: devices under sys/devices/pci…, and links to them
// from sys/bus/pci/devices and sys/class.
type fixture struct {
	t    *testing.T
	root string
	// nodesPerSocket is how many NUMA nodes share a socket (sub-NUMA
	// clustering); 0 or 1: each node is its own socket.
	nodesPerSocket int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, root: t.TempDir()}
}

func (f *fixture) file(rel, body string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// link makes rel a relative symbolic link to target (both under root), as
// sysfs's links are.
func (f *fixture) link(rel, target string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	to, err := filepath.Rel(filepath.Dir(p), filepath.Join(f.root, target))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(to, p); err != nil && !os.IsExist(err) {
		f.t.Fatal(err)
	}
}

// pci adds the PCI function at the end of path ("pci0000:15/0000:15:01.0/…")
// and the bridges above it, each linked from sys/bus/pci/devices, and
// returns the function's directory relative to root.
func (f *fixture) pci(path, class, vendor string, numa int, local string) string {
	f.t.Helper()
	dir := "sys/devices"
	parts := strings.Split(path, "/")
	for i, p := range parts {
		dir += "/" + p
		if i == 0 {
			continue
		}
		f.link("sys/bus/pci/devices/"+p, dir)
		c, v := "0x060400", "0x1000" // a bridge
		if i == len(parts)-1 {
			c, v = class, vendor
		}
		f.file(dir+"/class", c)
		f.file(dir+"/vendor", v)
		f.file(dir+"/numa_node", fmt.Sprint(numa))
		f.file(dir+"/local_cpulist", local)
	}
	return dir
}

func (f *fixture) rdma(name, devDir string) {
	f.link("sys/class/infiniband/"+name, devDir+"/infiniband/"+name)
	f.link(devDir+"/infiniband/"+name+"/device", devDir)
	f.file(devDir+"/infiniband/"+name+"/ports/1/state", "4: ACTIVE")
}

// netdev adds an interface; devDir "" is a virtual one (no device link).
func (f *fixture) netdev(name, devDir, typ string) {
	dir := "sys/devices/virtual/net/" + name
	if devDir != "" {
		dir = devDir + "/net/" + name
		f.link(dir+"/device", devDir)
	}
	f.file(dir+"/type", typ)
	f.link("sys/class/net/"+name, dir)
}

// cpus writes the online CPUs, each CPU's SMT siblings (siblings(c)), the
// NUMA nodes' CPU lists and distances, and this process's affinity and
// cgroup cpuset ("" for none).
func (f *fixture) cpus(online string, siblings func(int) string, nodes []string, distances []string, affinity, cgroup, cpuset string) {
	f.file("sys/devices/system/cpu/online", online)
	set, err := ParseCPUList(online)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range set {
		f.file(fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c), siblings(c))
	}
	// Each NUMA node is a socket of its own, unless f.nodesPerSocket says.
	per := max(f.nodesPerSocket, 1)
	for i, list := range nodes {
		cpus, err := ParseCPUList(list)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, c := range cpus {
			f.file(fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/physical_package_id", c), fmt.Sprint(i/per))
		}
	}
	for i, list := range nodes {
		f.file(fmt.Sprintf("sys/devices/system/node/node%d/cpulist", i), list)
		f.file(fmt.Sprintf("sys/devices/system/node/node%d/distance", i), distances[i])
	}
	f.file("proc/self/status", "Name:\tagent\nCpus_allowed:\tff\nCpus_allowed_list:\t"+affinity+"\nMems_allowed_list:\t0")
	if cgroup != "" {
		f.file("proc/self/cgroup", "0::"+cgroup)
		f.file("sys/fs/cgroup"+cgroup+"/cpuset.cpus.effective", cpuset)
	}
}

func noSMT(c int) string { return fmt.Sprint(c) }

// DGX H100, from its public `nvidia-smi topo -m`: two sockets of 56 cores
// with SMT (NUMA 0: 0-55,112-167; NUMA 1: 56-111,168-223); GPUs 0-3 and
// mlx5_0-3 on NUMA 0, 4-7 and mlx5_4-7 on NUMA 1; each GPU shares a PCIe
// switch with one ConnectX-7 (PIX). Also there: four NVSwitches, the BMC's
// VGA and an onboard Ethernet port, none of them a GPU.
var dgxGPUBuses = []int{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf}

const (
	dgxNode0 = "0-55,112-167"
	dgxNode1 = "56-111,168-223"
)

func dgxH100(t *testing.T, affinity, cgroup, cpuset string) string {
	f := newFixture(t)
	smt := func(c int) string {
		if c < 112 {
			return fmt.Sprintf("%d,%d", c, c+112)
		}
		return fmt.Sprintf("%d,%d", c-112, c)
	}
	f.cpus("0-223", smt, []string{dgxNode0, dgxNode1}, []string{"10 21", "21 10"}, affinity, cgroup, cpuset)
	for i, bus := range dgxGPUBuses {
		numa, local := i/4, []string{dgxNode0, dgxNode1}[i/4]
		h := bus - 6
		sw := fmt.Sprintf("pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", h, h, h+1)
		f.pci(fmt.Sprintf("%s/0000:%02x:00.0/0000:%02x:00.0", sw, h+2, bus), "0x030200", "0x10de", numa, local)
		nic := f.pci(fmt.Sprintf("%s/0000:%02x:01.0/0000:%02x:00.0", sw, h+2, bus-1), "0x020700", "0x15b3", numa, local)
		f.rdma(fmt.Sprintf("mlx5_%d", i), nic)
	}
	for i := range 4 {
		f.pci(fmt.Sprintf("pci0000:a0/0000:a0:01.0/0000:a1:00.0/0000:a2:0%d.0/0000:a%d:00.0", i, i+3), "0x068000", "0x10de", 1, dgxNode1)
	}
	f.pci("pci0000:00/0000:00:1c.0/0000:02:00.0", "0x030000", "0x1a03", 0, dgxNode0)
	eno := f.pci("pci0000:00/0000:00:1d.0/0000:03:00.0", "0x020000", "0x8086", 0, dgxNode0)
	f.netdev("eno1", eno, "1")
	f.netdev("lo", "", "772")
	f.netdev("docker0", "", "1")
	return f.root
}

// oneSocket4GPU is the lent H100 box, a virtual machine: four GPUs and a
// virtio NIC on the root bus, no NUMA node given (-1), every CPU local to
// every device, no SMT.
func oneSocket4GPU(t *testing.T) string {
	f := newFixture(t)
	f.cpus("0-63", noSMT, []string{"0-63"}, []string{"10"}, "0-63", "/", "0-63")
	for i := range 4 {
		f.pci(fmt.Sprintf("pci0000:00/0000:00:%02x.0", 5+i), "0x030200", "0x10de", -1, "0-63")
	}
	ens := f.pci("pci0000:00/0000:00:03.0", "0x020000", "0x1af4", -1, "0-63")
	f.netdev("ens3", ens+"/virtio0", "1")
	return f.root
}

// amdNode has two sockets of 8 cores, two AMD GPUs on each (with the HDMI
// audio function they carry, not a GPU), each GPU under a switch with a
// RoCE NIC that has its Ethernet interface too.
func amdNode(t *testing.T) string {
	f := newFixture(t)
	f.cpus("0-15", noSMT, []string{"0-7", "8-15"}, []string{"10 32", "32 10"}, "0-15", "", "")
	for i, bus := range []int{0x0c, 0x22, 0x8c, 0xa2} {
		numa, local := i/2, []string{"0-7", "8-15"}[i/2]
		sw := fmt.Sprintf("pci0000:%02x/0000:%02x:01.1/0000:%02x:00.0", bus-4, bus-4, bus-3)
		f.pci(fmt.Sprintf("%s/0000:%02x:00.0/0000:%02x:00.0", sw, bus-2, bus), "0x038000", "0x1002", numa, local)
		f.pci(fmt.Sprintf("%s/0000:%02x:00.0/0000:%02x:00.1", sw, bus-2, bus), "0x040300", "0x1002", numa, local)
		nic := f.pci(fmt.Sprintf("%s/0000:%02x:01.0/0000:%02x:00.0", sw, bus-2, bus+1), "0x020000", "0x14e4", numa, local)
		f.rdma(fmt.Sprintf("bnxt_re%d", i), nic)
		f.netdev(fmt.Sprintf("ens%dnp0", i), nic, "1")
	}
	return f.root
}

// container hides /sys/bus/pci and has only a veth: CPUs and NUMA nodes
// are there, the devices are not.
func container(t *testing.T) string {
	f := newFixture(t)
	f.cpus("0-7", noSMT, []string{"0-7"}, []string{"10"}, "0-3", "/", "0-3")
	f.netdev("eth0", "", "1")
	return f.root
}

// smtNode has one socket of four cores, two threads each (siblings c and
// c+4), and one GPU.
func smtNode(t *testing.T) string {
	f := newFixture(t)
	f.cpus("0-7", func(c int) string { return fmt.Sprintf("%d,%d", c%4, c%4+4) }, []string{"0-7"}, []string{"10"}, "0-7", "/", "0-7")
	f.pci("pci0000:00/0000:00:01.0/0000:01:00.0", "0x030000", "0x10de", 0, "0-7")
	return f.root
}

// sncNode has two sockets split into two NUMA nodes each (sub-NUMA
// clustering), 4 cores a node without SMT, and one GPU on each NUMA node.
func sncNode(t *testing.T) string {
	f := newFixture(t)
	f.nodesPerSocket = 2
	nodes := []string{"0-3", "4-7", "8-11", "12-15"}
	f.cpus("0-15", noSMT, nodes, []string{"10 11 21 21", "11 10 21 21", "21 21 10 11", "21 21 11 10"}, "0-15", "/", "0-15")
	for i := range 4 {
		f.pci(fmt.Sprintf("pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", 0x10*(i+1), 0x10*(i+1), 0x10*(i+1)+1), "0x030200", "0x10de", i, nodes[i])
	}
	return f.root
}
