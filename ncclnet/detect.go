// Package ncclnet detects a node's network for NCCL from sysfs and its
// routes: the interface, the InfiniBand HCAs and their GID index.
package ncclnet

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/musterhq/muster/sysfs"
)

// The NCCL variables that network detection may set.
const (
	EnvNCCLSocketIfname = "NCCL_SOCKET_IFNAME"
	EnvNCCLIBHCA        = "NCCL_IB_HCA"
	EnvNCCLIBGIDIndex   = "NCCL_IB_GID_INDEX"
	envNCCLIBDisable    = "NCCL_IB_DISABLE"
)

const (
	// ncclAutoGIDVersion is NCCL 2.21.0: from there on NCCL scans the GID
	// table for a RoCE v2 IPv4 GID itself; older releases use index 0.
	ncclAutoGIDVersion = 22100

	// Bounds on what is read from sysfs: its files are one short line, and
	// a node has tens of devices and a GID table of at most a few hundred.
	maxSysfsFile  = 128
	maxRDMADevs   = 128
	maxRDMAPorts  = 16
	maxGIDEntries = 1024
	maxListItems  = 64
)

// Result is what muster detected of this node's network for NCCL; an empty
// field means nothing was detected and nothing is set.
type Result struct {
	SocketIfname string // NCCL_SOCKET_IFNAME, e.g. "=eth0"
	IBHCA        string // NCCL_IB_HCA, e.g. "=mlx5_0:1,mlx5_1:1"
	IBGIDIndex   string // NCCL_IB_GID_INDEX, e.g. "3"

	// Reasons says why, one line per decision, for people (launcher doctor).
	Reasons []string
}

// Vars lists the three variables in a fixed order with their detected
// values ("" when not set).
func (n Result) Vars() [][2]string {
	return [][2]string{
		{EnvNCCLSocketIfname, n.SocketIfname},
		{EnvNCCLIBHCA, n.IBHCA},
		{EnvNCCLIBGIDIndex, n.IBGIDIndex},
	}
}

// Options says where and for what to detect.
type Options struct {
	// SysRoot is where sysfs is mounted; "" means "/sys".
	SysRoot string
	// MasterAddr is the job's master (bootstrap root) address; the zero
	// value means unknown and leaves NCCL_SOCKET_IFNAME to NCCL.
	MasterAddr netip.Addr
	// NCCLVersion is NCCL's version code (22809 for 2.28.9); 0 is unknown.
	NCCLVersion int
	// UserEnv holds the variables the user set; detection leaves those
	// alone and takes them into account for the others.
	UserEnv map[string]string
}

// Detect works out NCCL_SOCKET_IFNAME, NCCL_IB_HCA and
// NCCL_IB_GID_INDEX for this node. Missing or odd sysfs files and a missing
// route only leave a variable unset, with a reason; an error means the
// options themselves are wrong.
func Detect(opts Options) (Result, error) {
	var n Result
	master := opts.MasterAddr.Unmap()
	if master.IsValid() && (master.IsUnspecified() || master.IsMulticast()) {
		return n, fmt.Errorf("detect nccl network: master address %s is not a unicast address", master)
	}
	sysRoot := opts.SysRoot
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	note := func(format string, args ...any) { n.Reasons = append(n.Reasons, fmt.Sprintf(format, args...)) }

	// The addresses of the socket interface, to tell which RoCE GID is the
	// one NCCL's bootstrap network also uses.
	var ifAddrs []netip.Addr
	if v, ok := opts.UserEnv[EnvNCCLSocketIfname]; ok {
		note("%s: set by the user to %q, left alone", EnvNCCLSocketIfname, v)
		ifAddrs = addrsOfMatching(parseNCCLList(v))
	} else if !master.IsValid() {
		note("%s: not set: no master address is known, NCCL picks an interface itself", EnvNCCLSocketIfname)
	} else if iface, why, err := routeInterface(master); err != nil {
		note("%s: not set: %v", EnvNCCLSocketIfname, err)
	} else {
		n.SocketIfname = "=" + iface.Name
		ifAddrs = iface.Addrs
		note("%s: %s", EnvNCCLSocketIfname, why)
	}

	if v := opts.UserEnv[envNCCLIBDisable]; v != "" && v != "0" {
		note("%s, %s: not set: the user set %s=%s", EnvNCCLIBHCA, EnvNCCLIBGIDIndex, envNCCLIBDisable, v)
		return n, nil
	}
	ports, why := scanRDMA(filepath.Join(sysRoot, "class", "infiniband"))
	n.Reasons = append(n.Reasons, why...)

	if v, ok := opts.UserEnv[EnvNCCLIBHCA]; ok {
		note("%s: set by the user to %q, left alone", EnvNCCLIBHCA, v)
		ports = userPorts(ports, parseNCCLList(v))
	} else {
		var value, reason string
		ports, value, reason = chooseHCAs(ports)
		n.IBHCA = value
		note("%s: %s", EnvNCCLIBHCA, reason)
	}

	if v, ok := opts.UserEnv[EnvNCCLIBGIDIndex]; ok {
		note("%s: set by the user to %q, left alone", EnvNCCLIBGIDIndex, v)
	} else if opts.NCCLVersion >= ncclAutoGIDVersion {
		note("%s: not set: NCCL %s picks the RoCE v2 GID itself (2.21 and newer do)", EnvNCCLIBGIDIndex, formatNCCLVersion(opts.NCCLVersion))
	} else {
		idx, reason := chooseGIDIndex(ports, ifAddrs)
		if idx >= 0 {
			n.IBGIDIndex = strconv.Itoa(idx)
			if opts.NCCLVersion == 0 {
				reason += " (NCCL version unknown, so set as for NCCL older than 2.21)"
			}
		}
		note("%s: %s", EnvNCCLIBGIDIndex, reason)
	}
	return n, nil
}

// UserVars picks the NCCL_* variables out of an environment such as
// os.Environ(): those the user set, which win over detection. NCCL_VERSION
// is left out: NVIDIA's container images set it as a label, NCCL reads none.
func UserVars(environ []string) map[string]string {
	vars := make(map[string]string)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "NCCL_") && k != "NCCL_VERSION" {
			vars[k] = v
		}
	}
	return vars
}

// ParseVersion turns "2.28.9" into NCCL's version code 22809.
func ParseVersion(s string) (int, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) != 3 {
		return 0, fmt.Errorf("nccl version %q: want MAJOR.MINOR.PATCH", s)
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 99 {
			return 0, fmt.Errorf("nccl version %q: bad number %q", s, p)
		}
		v[i] = n
	}
	if v[0] != 2 {
		return 0, fmt.Errorf("nccl version %q: only NCCL 2 is known", s)
	}
	if v[1] < 9 {
		// Before 2.9 the code was major*1000 + minor*100 + patch.
		return v[0]*1000 + v[1]*100 + v[2], nil
	}
	return v[0]*10000 + v[1]*100 + v[2], nil
}

// formatNCCLVersion turns NCCL's version code into "2.28.9"; 0 is "unknown".
func formatNCCLVersion(code int) string {
	switch {
	case code <= 0:
		return "unknown"
	case code < 10000:
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	default:
		return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
	}
}

// localIface is a network interface with its addresses.
type localIface struct {
	Name    string
	Addrs   []netip.Addr
	Running bool
	Nets    []netip.Prefix
}

func interfaces() ([]localIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []localIface
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		li := localIface{Name: ifc.Name, Running: ifc.Flags&net.FlagRunning != 0}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			li.Addrs = append(li.Addrs, ip.Unmap())
			li.Nets = append(li.Nets, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, li)
	}
	return out, nil
}

// routeInterface finds the interface NCCL should use to reach master. It asks
// the kernel for the source address of a connected UDP socket (connect sends
// nothing but runs the full route lookup, policy rules included), then finds
// the interface holding that address. On the master's own node the source is
// the master address itself, so the answer is the interface that holds it,
// not lo as the local route would say.
func routeInterface(master netip.Addr) (localIface, string, error) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(master, 9)))
	if err != nil {
		return localIface{}, "", fmt.Errorf("no route to %s: %w", master, err)
	}
	src := conn.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap().WithZone("")
	conn.Close()

	ifs, err := interfaces()
	if err != nil {
		return localIface{}, "", err
	}
	var holders []localIface
	for _, ifc := range ifs {
		if slices.Contains(ifc.Addrs, src) {
			holders = append(holders, ifc)
		}
	}
	if len(holders) == 0 {
		return localIface{}, "", fmt.Errorf("no interface holds %s, the source address towards %s", src, master)
	}
	// An address held twice (unnumbered links): prefer the interface whose
	// subnet holds the master.
	pick := holders[0]
	for _, h := range holders {
		if slices.ContainsFunc(h.Nets, func(p netip.Prefix) bool { return p.Bits() < p.Addr().BitLen() && p.Contains(master) }) {
			pick = h
			break
		}
	}
	var why string
	if src == master.WithZone("") {
		why = fmt.Sprintf("=%s: the master address %s is this node's own, held by %s", pick.Name, master, pick.Name)
	} else {
		why = fmt.Sprintf("=%s: the route to the master %s leaves through %s (source address %s)", pick.Name, master, pick.Name, src)
	}
	if len(holders) > 1 {
		names := make([]string, len(holders))
		for i, h := range holders {
			names[i] = h.Name
		}
		why += fmt.Sprintf("; %s is also on %s", src, strings.Join(names, ", "))
	}
	if !pick.Running {
		why += fmt.Sprintf("; warning: %s is not running and NCCL skips interfaces that are not", pick.Name)
	}
	return pick, why, nil
}

// addrsOfMatching returns the addresses of the running interfaces that an
// NCCL_SOCKET_IFNAME value selects.
func addrsOfMatching(l ncclList) []netip.Addr {
	ifs, err := interfaces()
	if err != nil {
		return nil
	}
	var addrs []netip.Addr
	for _, ifc := range ifs {
		if ifc.Running && l.match(ifc.Name, -1) {
			addrs = append(addrs, ifc.Addrs...)
		}
	}
	return addrs
}

// ncclList is NCCL's device list syntax, shared by NCCL_SOCKET_IFNAME and
// NCCL_IB_HCA: an optional "^" (exclude), an optional "=" (exact names, not
// prefixes), then "name[:port]" items separated by commas.
type ncclList struct {
	not, exact bool
	items      []listItem
}

type listItem struct {
	name string
	port int // -1: any port
}

func parseNCCLList(s string) ncclList {
	var l ncclList
	s, l.not = strings.CutPrefix(s, "^")
	s, l.exact = strings.CutPrefix(s, "=")
	for _, entry := range strings.Split(s, ",") {
		if len(l.items) == maxListItems {
			break
		}
		name, rest, _ := strings.Cut(entry, ":")
		if name == "" {
			continue
		}
		port := -1
		if p, _, _ := strings.Cut(rest, ":"); p != "" {
			port = leadingInt(p)
		}
		l.items = append(l.items, listItem{name: name, port: port})
	}
	return l
}

// leadingInt reads a number the way C's atoi does: leading digits, else 0.
func leadingInt(s string) int {
	end := 0
	for end < len(s) && end < 9 && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(s[:end])
	return n
}

// match says whether NCCL would use device name (port -1: any) under l. An
// empty list selects everything, as in NCCL.
func (l ncclList) match(name string, port int) bool {
	found := len(l.items) == 0
	for _, it := range l.items {
		nameOK := name == it.name || (!l.exact && strings.HasPrefix(name, it.name))
		portOK := port == -1 || it.port == -1 || port == it.port
		if nameOK && portOK {
			found = true
			break
		}
	}
	return found != l.not
}

// rdmaPort is one active InfiniBand or RoCE port.
type rdmaPort struct {
	Dev  string
	Port int
	Link string // "InfiniBand" or "Ethernet"
	GIDs []roceGID
}

func (p rdmaPort) String() string { return fmt.Sprintf("%s:%d", p.Dev, p.Port) }

// roceGID is a RoCE v2 GID holding an IPv4-mapped address.
type roceGID struct {
	Index int
	Addr  netip.Addr
}

// scanRDMA reads the active ports under dir (SYSROOT/class/infiniband) and,
// for Ethernet ports, their RoCE v2 IPv4 GIDs. Anything odd is skipped with
// a reason.
func scanRDMA(dir string) ([]rdmaPort, []string) {
	var why []string
	devs, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, []string{fmt.Sprintf("%s: no RDMA devices (no %s)", EnvNCCLIBHCA, dir)}
	}
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: cannot list RDMA devices: %v", EnvNCCLIBHCA, err)}
	}
	if len(devs) > maxRDMADevs {
		why = append(why, fmt.Sprintf("%s: %d RDMA devices, only the first %d read", EnvNCCLIBHCA, len(devs), maxRDMADevs))
		devs = devs[:maxRDMADevs]
	}
	var ports []rdmaPort
	for _, d := range devs {
		dev := d.Name()
		if !validDevName(dev) {
			why = append(why, fmt.Sprintf("%s: skipped device %q: odd name", EnvNCCLIBHCA, dev))
			continue
		}
		portDir := filepath.Join(dir, dev, "ports")
		pents, err := os.ReadDir(portDir)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: skipped %s: %v", EnvNCCLIBHCA, dev, err))
			continue
		}
		nports := 0
		for _, pe := range pents {
			num, err := strconv.Atoi(pe.Name())
			if err != nil || num < 1 || num > 255 {
				continue
			}
			if nports++; nports > maxRDMAPorts {
				break
			}
			p := rdmaPort{Dev: dev, Port: num}
			pdir := filepath.Join(portDir, pe.Name())
			b, err := readSmall(filepath.Join(pdir, "state"))
			if err != nil {
				why = append(why, fmt.Sprintf("%s: skipped %s: %v", EnvNCCLIBHCA, p, err))
				continue
			}
			state, name, err := parsePortState(b)
			if err != nil {
				why = append(why, fmt.Sprintf("%s: skipped %s: %v", EnvNCCLIBHCA, p, err))
				continue
			}
			if state != 4 {
				why = append(why, fmt.Sprintf("%s: skipped %s: port state %d: %s, not ACTIVE", EnvNCCLIBHCA, p, state, name))
				continue
			}
			b, err = readSmall(filepath.Join(pdir, "link_layer"))
			if err != nil {
				why = append(why, fmt.Sprintf("%s: skipped %s: %v", EnvNCCLIBHCA, p, err))
				continue
			}
			p.Link = strings.TrimSpace(string(b))
			if p.Link != "InfiniBand" && p.Link != "Ethernet" {
				why = append(why, fmt.Sprintf("%s: skipped %s: link layer %q is neither InfiniBand nor Ethernet", EnvNCCLIBHCA, p, p.Link))
				continue
			}
			if p.Link == "Ethernet" {
				p.GIDs = scanGIDs(pdir)
			}
			ports = append(ports, p)
		}
	}
	sort.Slice(ports, func(i, j int) bool { return portLess(ports[i], ports[j]) })
	return ports, why
}

// scanGIDs lists the RoCE v2 GIDs of a port that hold an IPv4 address; GID
// entries that cannot be read (unpopulated, or not mapped into a container)
// are simply not candidates.
func scanGIDs(pdir string) []roceGID {
	ents, err := os.ReadDir(filepath.Join(pdir, "gids"))
	if err != nil {
		return nil
	}
	var gids []roceGID
	for i, e := range ents {
		if i == maxGIDEntries {
			break
		}
		idx, err := strconv.Atoi(e.Name())
		if err != nil || idx < 0 || idx >= maxGIDEntries {
			continue
		}
		b, err := readSmall(filepath.Join(pdir, "gids", e.Name()))
		if err != nil {
			continue
		}
		gid, err := parseGID(b)
		if err != nil {
			continue
		}
		ip, ok := ipv4OfGID(gid)
		if !ok {
			continue
		}
		b, err = readSmall(filepath.Join(pdir, "gid_attrs", "types", e.Name()))
		if err != nil || parseGIDType(b) != 2 {
			continue
		}
		gids = append(gids, roceGID{Index: idx, Addr: ip})
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i].Index < gids[j].Index })
	return gids
}

// chooseHCAs picks the ports for NCCL_IB_HCA and gives the value and why.
// NCCL refuses to merge or connect ports of different link layers, so when a
// node has both, the InfiniBand ports (the compute fabric) are listed alone.
func chooseHCAs(ports []rdmaPort) ([]rdmaPort, string, string) {
	if len(ports) == 0 {
		return nil, "", "not set: no active InfiniBand or RoCE port"
	}
	note := ""
	var ib []rdmaPort
	for _, p := range ports {
		if p.Link == "InfiniBand" {
			ib = append(ib, p)
		}
	}
	if len(ib) > 0 && len(ib) < len(ports) {
		var eth []string
		for _, p := range ports {
			if p.Link == "Ethernet" {
				eth = append(eth, p.String())
			}
		}
		note = fmt.Sprintf("; RoCE ports %s left out, NCCL cannot mix link layers", strings.Join(eth, ","))
		ports = ib
	}
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = p.String()
	}
	value := "=" + strings.Join(names, ",")
	kind := map[string]string{"InfiniBand": "InfiniBand", "Ethernet": "RoCE"}[ports[0].Link]
	return ports, value, fmt.Sprintf("%s: the active %s ports, exact names so that mlx5_1 does not also take mlx5_10%s", value, kind, note)
}

// userPorts keeps the ports that the user's NCCL_IB_HCA selects.
func userPorts(ports []rdmaPort, l ncclList) []rdmaPort {
	var out []rdmaPort
	for _, p := range ports {
		if l.match(p.Dev, p.Port) {
			out = append(out, p)
		}
	}
	return out
}

// chooseGIDIndex picks the one NCCL_IB_GID_INDEX for the RoCE ports: the
// RoCE v2 IPv4 GID on the socket interface's address when there is one,
// else the index that most ports share (the lowest on a tie, as NCCL's own
// scan keeps the first). It returns -1 when nothing is to be set.
func chooseGIDIndex(ports []rdmaPort, prefer []netip.Addr) (int, string) {
	var roce []rdmaPort
	for _, p := range ports {
		if p.Link == "Ethernet" {
			roce = append(roce, p)
		}
	}
	if len(roce) == 0 {
		return -1, "not set: no RoCE port in use (InfiniBand needs no GID index)"
	}
	for _, p := range roce {
		for _, g := range p.GIDs {
			if slices.Contains(prefer, g.Addr) {
				return g.Index, fmt.Sprintf("%d: the RoCE v2 GID of %s holds %s, the socket interface's address", g.Index, p, g.Addr)
			}
		}
	}
	count := map[int][]string{}
	for _, p := range roce {
		seen := map[int]bool{}
		for _, g := range p.GIDs {
			if !seen[g.Index] {
				seen[g.Index] = true
				count[g.Index] = append(count[g.Index], p.String())
			}
		}
	}
	if len(count) == 0 {
		return -1, "not set: no RoCE v2 GID with an IPv4 address on the RoCE ports"
	}
	best := -1
	for idx, on := range count {
		if best < 0 || len(on) > len(count[best]) || (len(on) == len(count[best]) && idx < best) {
			best = idx
		}
	}
	why := fmt.Sprintf("%d: the RoCE v2 IPv4 GID index on %s", best, strings.Join(count[best], ","))
	if len(count[best]) < len(roce) {
		why += fmt.Sprintf("; other ports have theirs elsewhere and NCCL takes one index for all (%d of %d ports)", len(count[best]), len(roce))
	}
	return best, why
}

// readSmall reads a sysfs attribute, refusing anything longer than a line.
func readSmall(path string) ([]byte, error) { return sysfs.Read(path, maxSysfsFile) }

// parsePortState parses a port's state file, e.g. "4: ACTIVE".
func parsePortState(b []byte) (int, string, error) {
	s := strings.TrimSpace(string(b))
	num, name, ok := strings.Cut(s, ": ")
	if !ok {
		return 0, "", fmt.Errorf("port state %q: want \"N: NAME\"", s)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n > 255 || num != strconv.Itoa(n) {
		return 0, "", fmt.Errorf("port state %q: bad number", s)
	}
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return !(r >= 'A' && r <= 'Z' || r == '_') }) >= 0 {
		return 0, "", fmt.Errorf("port state %q: bad name", s)
	}
	return n, name, nil
}

// parseGID parses a GID file: eight groups of four hex digits separated by
// colons, as the kernel writes them.
func parseGID(b []byte) ([16]byte, error) {
	var gid [16]byte
	s := strings.TrimSpace(string(b))
	if len(s) != 39 {
		return gid, fmt.Errorf("gid %q: want 8 groups of 4 hex digits", s)
	}
	for i := range 8 {
		g := s[i*5 : i*5+4]
		if i < 7 && s[i*5+4] != ':' {
			return gid, fmt.Errorf("gid %q: want 8 groups of 4 hex digits", s)
		}
		v, err := strconv.ParseUint(g, 16, 16)
		if err != nil {
			return gid, fmt.Errorf("gid %q: bad group %q", s, g)
		}
		gid[2*i] = byte(v >> 8)
		gid[2*i+1] = byte(v)
	}
	return gid, nil
}

// ipv4OfGID returns the IPv4 address of an IPv4-mapped GID
// (::ffff:a.b.c.d); other GIDs (link-local, IPv6, unset) have none.
func ipv4OfGID(gid [16]byte) (netip.Addr, bool) {
	a := netip.AddrFrom16(gid)
	if !a.Is4In6() {
		return netip.Addr{}, false
	}
	ip := a.Unmap()
	if ip.IsUnspecified() {
		return netip.Addr{}, false
	}
	return ip, true
}

// parseGIDType reads a gid_attrs/types file: 1 for "IB/RoCE v1" or
// "RoCE v1", 2 for "RoCE v2", 0 for anything else.
func parseGIDType(b []byte) int {
	switch strings.TrimSpace(string(b)) {
	case "IB/RoCE v1", "RoCE v1":
		return 1
	case "RoCE v2":
		return 2
	}
	return 0
}

// validDevName accepts the RDMA device names the kernel makes (mlx5_0,
// rocep1s0f0, ibp12s0) and nothing that could confuse NCCL's list syntax.
func validDevName(s string) bool { return sysfs.ValidName(s) }

// portLess orders ports by device name with trailing numbers compared as
// numbers (mlx5_2 before mlx5_10), then by port.
func portLess(a, b rdmaPort) bool {
	if a.Dev != b.Dev {
		return sysfs.CompareNames(a.Dev, b.Dev) < 0
	}
	return a.Port < b.Port
}
