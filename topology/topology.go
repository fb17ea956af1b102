// Package topology reads a node's hardware topology from sysfs once: its
// GPUs and NICs with their PCI paths, NUMA nodes and PCI switches, the NUMA
// nodes' CPUs and distances, SMT siblings and the CPUs this process may use.
// What cannot be read is said in Notes; reading never fails.
package topology

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster/sysfs"
)

// Bounds on what is read: a node has tens of GPUs and NICs, a few thousand
// PCI functions at most, and its lists fit well within these sizes.
const (
	maxAttr       = 128     // a one-line attribute (class, vendor, numa_node)
	maxListFile   = 1 << 16 // a cpulist or distance file: 8192 CPUs, one by one
	maxStatusFile = 1 << 16 // /proc/self/status
	maxPCIDevices = 8192
	maxDevices    = 128 // GPUs, and NICs of each kind
	maxNotes      = 32
)

// Vendors of the GPUs muster knows, by PCI vendor ID.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
)

var gpuVendors = map[string]string{"0x10de": VendorNVIDIA, "0x1002": VendorAMD}

// Kinds of NIC.
const (
	NICRDMA     = "rdma"     // under /sys/class/infiniband (InfiniBand or RoCE)
	NICEthernet = "ethernet" // under /sys/class/net, with a PCI device
)

// Topology is what one node's sysfs says of its hardware.
type Topology struct {
	GPUs      []GPU
	NICs      []NIC
	NUMANodes []NUMANode
	// Online is every CPU the kernel runs; Allowed those this process may
	// run on: its affinity within its cgroup's cpuset.
	Online  CPUSet
	Allowed CPUSet
	// Cores are the SMT sibling groups, by their first CPU; ThreadsPerCore
	// is the largest group, 1 without SMT, 0 when unknown.
	Cores          []CPUSet
	ThreadsPerCore int
	// Sockets are the online CPUs of each physical package, by its first
	// CPU; empty when sysfs does not say.
	Sockets []CPUSet
	// Notes says, one line each, what could not be read and what that means.
	Notes []string
}

// GPU is one GPU as sysfs sees it.
type GPU struct {
	// Index is the GPU's number among its vendor's: PCI bus order, which is
	// NVML's index order (and CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID).
	Index   int
	Vendor  string
	PCIAddr string // 0000:1b:00.0
	PCI
	// NearestNIC is the name of the NIC nearest it, NearestBy how: "switch"
	// (under the same PCI switch) or "numa" (on the same NUMA node); both
	// "" when no NIC is near.
	NearestNIC string
	NearestBy  string
}

// NIC is one network device with a PCI function behind it.
type NIC struct {
	Name    string // mlx5_0, eth0
	Kind    string // NICRDMA or NICEthernet
	PCIAddr string
	PCI
	// Port is an RDMA device's first port (UCX names a device mlx5_0:1), 0
	// for Ethernet or when sysfs lists none.
	Port int
}

// PCI is where a device sits in the PCI tree.
type PCI struct {
	// Path is the chain of PCI functions from the root bus down to the
	// device, as its sysfs real path gives it ("0000:15:01.0/0000:16:00.0/…").
	Path string
	// Switch is the PCI switch the device hangs under: the first function
	// below the root port on its path, "" when it hangs off a root port or
	// the root bus directly.
	Switch string
	// NUMANode is its NUMA node, -1 when the platform gives none.
	NUMANode int
	// LocalCPUs are the CPUs near it (local_cpulist); empty when unknown.
	LocalCPUs CPUSet
}

// NUMANode is one NUMA node with its CPUs and its distances to every node,
// by node number.
type NUMANode struct {
	ID        int
	CPUs      CPUSet
	Distances []int
}

// Read reads the topology of the node whose root file system is at root:
// "/" in production, a fixture in tests. It reads root/sys and
// root/proc/self.
func Read(root string) *Topology {
	t := &Topology{}
	sys := filepath.Join(root, "sys")
	t.readCPUs(root, sys)
	t.readNUMA(sys)
	t.readGPUs(root, sys)
	t.readNICs(root, sys)
	for i := range t.GPUs {
		if n, by := NearestNIC(t.NICs, t.GPUs[i].PCI); n >= 0 {
			t.GPUs[i].NearestNIC, t.GPUs[i].NearestBy = t.NICs[n].Name, by
		}
	}
	return t
}

func (t *Topology) note(format string, args ...any) {
	if len(t.Notes) < maxNotes {
		t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
	}
}

// readList reads and parses a CPU list file.
func readList(path string) (CPUSet, error) {
	b, err := sysfs.Read(path, maxListFile)
	if err != nil {
		return nil, err
	}
	return ParseCPUList(string(b))
}

// readCPUs reads the online CPUs, the SMT siblings and the allowed CPUs.
func (t *Topology) readCPUs(root, sys string) {
	cpuDir := filepath.Join(sys, "devices", "system", "cpu")
	online, err := readList(filepath.Join(cpuDir, "online"))
	if err != nil {
		t.note("online CPUs unknown: %v", err)
	}
	t.Online = online

	seen := map[string]bool{}
	sockets := map[int]CPUSet{}
	for _, c := range online {
		if id, err := sysfs.Read(filepath.Join(cpuDir, "cpu"+strconv.Itoa(c), "topology", "physical_package_id"), maxAttr); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(id))); err == nil && n >= 0 && n < MaxCPUs {
				sockets[n] = append(sockets[n], c)
			}
		}
		sib, err := readList(filepath.Join(cpuDir, "cpu"+strconv.Itoa(c), "topology", "thread_siblings_list"))
		if err != nil || len(sib) == 0 {
			continue
		}
		if key := sib.String(); !seen[key] {
			seen[key] = true
			t.Cores = append(t.Cores, sib)
			t.ThreadsPerCore = max(t.ThreadsPerCore, len(sib))
		}
	}
	if len(online) > 0 && len(t.Cores) == 0 {
		t.note("SMT siblings unknown: no thread_siblings_list under %s", cpuDir)
	}
	slices.SortFunc(t.Cores, func(a, b CPUSet) int { return cmp.Compare(a[0], b[0]) })
	for _, cpus := range sockets {
		t.Sockets = append(t.Sockets, cpus)
	}
	slices.SortFunc(t.Sockets, func(a, b CPUSet) int { return cmp.Compare(a[0], b[0]) })

	t.Allowed = online
	status, err := sysfs.Read(filepath.Join(root, "proc", "self", "status"), maxStatusFile)
	if err == nil {
		if aff, ok := statusField(status, "Cpus_allowed_list:"); ok {
			if set, err := ParseCPUList(aff); err != nil {
				t.note("affinity unknown: %v", err)
			} else {
				t.Allowed = set
			}
		}
	} else {
		t.note("affinity unknown, all online CPUs taken as allowed: %v", err)
	}
	if cpuset, path, err := readCpuset(root, sys); err == nil {
		t.Allowed = t.Allowed.Intersect(cpuset)
	} else if path != "" && !errors.Is(err, fs.ErrNotExist) {
		t.note("cgroup cpuset %s unknown: %v", path, err)
	}
	if t.Allowed == nil {
		t.Allowed = CPUSet{}
	}
}

// statusField finds a "Name:\tvalue" line of /proc/self/status.
func statusField(b []byte, name string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// readCpuset reads the effective cpuset of this process's cgroup v2. The
// kernel already keeps affinity within it; it is read as well so that an
// affinity file that says otherwise (an old kernel, a fixture) cannot widen
// the set.
func readCpuset(root, sys string) (CPUSet, string, error) {
	b, err := sysfs.Read(filepath.Join(root, "proc", "self", "cgroup"), maxStatusFile)
	if err != nil {
		return nil, "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		rel, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		rel = filepath.Clean("/" + rel)
		path := filepath.Join(sys, "fs", "cgroup", rel, "cpuset.cpus.effective")
		set, err := readList(path)
		return set, path, err
	}
	return nil, "", fs.ErrNotExist
}

// readNUMA reads each NUMA node's CPUs and distances.
func (t *Topology) readNUMA(sys string) {
	dir := filepath.Join(sys, "devices", "system", "node")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.note("NUMA nodes unknown: %v", err)
		return
	}
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "node")
		id, err := strconv.Atoi(num)
		if !ok || err != nil || id < 0 || id >= maxNUMANodes || strconv.Itoa(id) != num {
			continue
		}
		n := NUMANode{ID: id}
		if n.CPUs, err = readList(filepath.Join(dir, e.Name(), "cpulist")); err != nil {
			t.note("NUMA node %d: CPUs unknown: %v", id, err)
			n.CPUs = CPUSet{}
		}
		if b, err := sysfs.Read(filepath.Join(dir, e.Name(), "distance"), maxListFile); err != nil {
			t.note("NUMA node %d: distances unknown: %v", id, err)
		} else if n.Distances, err = ParseDistances(string(b)); err != nil {
			t.note("NUMA node %d: %v", id, err)
		}
		t.NUMANodes = append(t.NUMANodes, n)
	}
	slices.SortFunc(t.NUMANodes, func(a, b NUMANode) int { return cmp.Compare(a.ID, b.ID) })
}

// readGPUs finds the GPUs among the PCI functions: display controllers
// (class 0x03) of a GPU vendor, which leaves out NVSwitches (bridges) and
// a BMC's VGA.
func (t *Topology) readGPUs(root, sys string) {
	dir := filepath.Join(sys, "bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.note("GPUs' PCI topology unknown: %s cannot be read (a container that hides it?): %v", dir, err)
		return
	}
	if len(ents) > maxPCIDevices {
		t.note("%d PCI functions, only the first %d read", len(ents), maxPCIDevices)
		ents = ents[:maxPCIDevices]
	}
	for _, e := range ents {
		if _, ok := parsePCIAddr(e.Name()); !ok {
			continue
		}
		class, err1 := sysfs.Read(filepath.Join(dir, e.Name(), "class"), maxAttr)
		vendor, err2 := sysfs.Read(filepath.Join(dir, e.Name(), "vendor"), maxAttr)
		if err1 != nil || err2 != nil || !strings.HasPrefix(strings.TrimSpace(string(class)), "0x03") {
			continue
		}
		v, ok := gpuVendors[strings.TrimSpace(string(vendor))]
		if !ok {
			continue
		}
		if len(t.GPUs) == maxDevices {
			t.note("more than %d GPUs, only the first %d read", maxDevices, maxDevices)
			break
		}
		pci, err := t.pciOf(root, filepath.Join(dir, e.Name()))
		if err != nil {
			t.note("GPU %s: %v", e.Name(), err)
			continue
		}
		t.GPUs = append(t.GPUs, GPU{Vendor: v, PCIAddr: e.Name(), PCI: pci})
	}
	slices.SortFunc(t.GPUs, func(a, b GPU) int {
		return cmp.Or(cmp.Compare(a.Vendor, b.Vendor), comparePCI(a.PCIAddr, b.PCIAddr))
	})
	count := map[string]int{}
	for i := range t.GPUs {
		t.GPUs[i].Index = count[t.GPUs[i].Vendor]
		count[t.GPUs[i].Vendor]++
	}
}

// readNICs lists the RDMA devices and the Ethernet interfaces that have a
// PCI device (virtual interfaces have none).
func (t *Topology) readNICs(root, sys string) {
	for _, kind := range []struct{ kind, dir string }{
		{NICRDMA, filepath.Join(sys, "class", "infiniband")},
		{NICEthernet, filepath.Join(sys, "class", "net")},
	} {
		ents, err := os.ReadDir(kind.dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				t.note("%s NICs unknown: %v", kind.kind, err)
			}
			continue
		}
		found := 0
		for _, e := range ents {
			name := e.Name()
			dev := filepath.Join(kind.dir, name, "device")
			if !sysfs.ValidName(name) {
				continue
			}
			if _, err := os.Lstat(dev); err != nil {
				continue
			}
			if kind.kind == NICEthernet {
				// type 1 is ARPHRD_ETHER; IPoIB (32) is the RDMA device again.
				if b, err := sysfs.Read(filepath.Join(kind.dir, name, "type"), maxAttr); err == nil && strings.TrimSpace(string(b)) != "1" {
					continue
				}
			}
			if found++; found > maxDevices {
				t.note("more than %d %s NICs, only the first %d read", maxDevices, kind.kind, maxDevices)
				break
			}
			pci, err := t.pciOf(root, dev)
			if err != nil {
				t.note("NIC %s: %v", name, err)
				continue
			}
			addr := pci.Path[strings.LastIndexByte(pci.Path, '/')+1:]
			nic := NIC{Name: name, Kind: kind.kind, PCIAddr: addr, PCI: pci}
			if kind.kind == NICRDMA {
				nic.Port = firstPort(filepath.Join(kind.dir, name, "ports"))
			}
			t.NICs = append(t.NICs, nic)
		}
	}
	slices.SortStableFunc(t.NICs, func(a, b NIC) int {
		return cmp.Or(cmp.Compare(kindRank(a.Kind), kindRank(b.Kind)), compareNames(a.Name, b.Name))
	})
}

// firstPort is the lowest port number listed in an RDMA device's ports
// directory, 0 for none.
func firstPort(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	port := 0
	for i, e := range ents {
		if i == maxDevices {
			break
		}
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && n < 256 && (port == 0 || n < port) {
			port = n
		}
	}
	return port
}

func kindRank(kind string) int {
	if kind == NICRDMA {
		return 0
	}
	return 1
}

// pciOf follows a device link to its real path and reads where it sits:
// its chain of PCI functions, the switch above it, its NUMA node and local
// CPUs. A path that leaves root or holds no PCI function is an error.
func (t *Topology) pciOf(root, link string) (PCI, error) {
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return PCI{}, err
	}
	absRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return PCI{}, err
	}
	rel, err := filepath.Rel(absRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return PCI{}, fmt.Errorf("%s leads outside %s", link, root)
	}
	var chain []string
	devDir := ""
	dir := absRoot
	for part := range strings.SplitSeq(rel, "/") {
		dir = filepath.Join(dir, part)
		if _, ok := parsePCIAddr(part); ok {
			chain = append(chain, part)
			devDir = dir
		}
	}
	if len(chain) == 0 {
		return PCI{}, fmt.Errorf("%s is not a PCI device", link)
	}
	if len(chain) > 32 {
		return PCI{}, fmt.Errorf("%s: a PCI path %d deep", link, len(chain))
	}
	p := PCI{Path: strings.Join(chain, "/"), NUMANode: -1, LocalCPUs: CPUSet{}}
	if len(chain) >= 3 {
		p.Switch = chain[1]
	}
	if b, err := sysfs.Read(filepath.Join(devDir, "numa_node"), maxAttr); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= -1 && n < maxNUMANodes {
			p.NUMANode = n
		}
	}
	if set, err := readList(filepath.Join(devDir, "local_cpulist")); err == nil {
		p.LocalCPUs = set
	}
	return p, nil
}

// parsePCIAddr parses a PCI function's address, domain:bus:device.function
// in hex ("0000:1b:00.0"; domains may have more than four digits).
func parsePCIAddr(s string) ([4]uint64, bool) {
	var a [4]uint64
	dom, rest, ok1 := strings.Cut(s, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 || len(dom) < 4 || len(dom) > 8 || len(bus) != 2 || len(dev) != 2 || len(fn) != 1 {
		return a, false
	}
	for i, f := range []string{dom, bus, dev, fn} {
		v, err := strconv.ParseUint(f, 16, 32)
		if err != nil || strings.ToLower(f) != f {
			return a, false
		}
		a[i] = v
	}
	return a, a[2] < 32 && a[3] < 8
}

// comparePCI orders PCI addresses by domain, bus, device and function.
func comparePCI(x, y string) int {
	a, _ := parsePCIAddr(x)
	b, _ := parsePCIAddr(y)
	return slices.Compare(a[:], b[:])
}

// compareNames orders device names with trailing numbers as numbers
// (mlx5_2 before mlx5_10).
func compareNames(a, b string) int { return sysfs.CompareNames(a, b) }
