package ncclnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// sysTree writes files (paths relative to root) into a fresh fake sysfs.
func sysTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// gidEntry is one row of a port's GID table: the GID and its type.
type gidEntry struct{ gid, typ string }

// port gives the sysfs files of one RDMA port.
func port(dev string, n int, state, link string, gids map[int]gidEntry) map[string]string {
	dir := fmt.Sprintf("class/infiniband/%s/ports/%d/", dev, n)
	files := map[string]string{dir + "state": state + "\n", dir + "link_layer": link + "\n"}
	for i, g := range gids {
		files[fmt.Sprintf("%sgids/%d", dir, i)] = g.gid + "\n"
		files[fmt.Sprintf("%sgid_attrs/types/%d", dir, i)] = g.typ + "\n"
	}
	return files
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

const (
	active = "4: ACTIVE"
	down   = "1: DOWN"
	ib     = "InfiniBand"
	eth    = "Ethernet"

	gidLinkLocal = "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d"
	gidIPv6      = "fd00:0000:0000:0000:0000:0000:0000:0005"
	gidV4        = "0000:0000:0000:0000:0000:ffff:0a01:0005" // 10.1.0.5
	gidV4Other   = "0000:0000:0000:0000:0000:ffff:0a02:0007" // 10.2.0.7
	gidLoopback  = "0000:0000:0000:0000:0000:ffff:7f00:0001" // 127.0.0.1
	gidUnset     = "0000:0000:0000:0000:0000:0000:0000:0000"
)

// mlxGIDs is the usual mlx5 RoCE table: link-local v1 and v2, then the
// interface's IPv4 address as v1 and v2.
var mlxGIDs = map[int]gidEntry{
	0: {gidLinkLocal, "IB/RoCE v1"},
	1: {gidLinkLocal, "RoCE v2"},
	2: {gidV4, "IB/RoCE v1"},
	3: {gidV4, "RoCE v2"},
	4: {gidUnset, ""},
}

func TestDetectNCCLNet(t *testing.T) {
	loopback := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		name    string
		files   map[string]string
		master  netip.Addr
		version int
		user    map[string]string
		want    Result // Reasons are checked by wantWhy
		wantWhy string // a substring of one reason
	}{
		{
			name:    "no infiniband",
			master:  loopback,
			want:    Result{SocketIfname: "=lo"},
			wantWhy: "no RDMA devices",
		},
		{
			name:    "no master",
			files:   port("mlx5_0", 1, active, ib, nil),
			want:    Result{IBHCA: "=mlx5_0:1"},
			wantWhy: "no master address",
		},
		{
			name:    "ib active and down ports",
			files:   merge(port("mlx5_0", 1, active, ib, nil), port("mlx5_1", 1, down, ib, nil), port("mlx5_0", 2, "2: INIT", ib, nil)),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1"},
			wantWhy: "mlx5_1:1: port state 1: DOWN",
		},
		{
			name:   "only down ports",
			files:  port("mlx5_0", 1, down, ib, nil),
			master: loopback,
			want:   Result{SocketIfname: "=lo"},
		},
		{
			name:    "mlx5_1 and mlx5_10 listed exactly in numeric order",
			files:   merge(port("mlx5_10", 1, active, ib, nil), port("mlx5_1", 1, active, ib, nil), port("mlx5_2", 1, active, ib, nil)),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_1:1,mlx5_2:1,mlx5_10:1"},
			wantWhy: "exact names",
		},
		{
			name:    "roce v2 ipv4 gid for nccl 2.20",
			files:   port("mlx5_0", 1, active, eth, mlxGIDs),
			master:  loopback,
			version: 22005,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1", IBGIDIndex: "3"},
		},
		{
			name:    "nccl 2.21 picks the gid itself",
			files:   port("mlx5_0", 1, active, eth, mlxGIDs),
			master:  loopback,
			version: 22105,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1"},
			wantWhy: "picks the RoCE v2 GID itself",
		},
		{
			name:    "unknown nccl version sets the gid",
			files:   port("mlx5_0", 1, active, eth, mlxGIDs),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1", IBGIDIndex: "3"},
			wantWhy: "NCCL version unknown",
		},
		{
			name:    "roce v1 only",
			files:   port("mlx5_0", 1, active, eth, map[int]gidEntry{0: {gidLinkLocal, "IB/RoCE v1"}, 1: {gidV4, "RoCE v1"}}),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1"},
			wantWhy: "no RoCE v2 GID with an IPv4 address",
		},
		{
			name:   "ipv6 gid skipped for the ipv4-mapped one",
			files:  port("mlx5_0", 1, active, eth, map[int]gidEntry{1: {gidLinkLocal, "RoCE v2"}, 2: {gidIPv6, "RoCE v2"}, 5: {gidV4, "RoCE v2"}}),
			master: loopback,
			want:   Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1", IBGIDIndex: "5"},
		},
		{
			name:   "ipv6 gids only",
			files:  port("mlx5_0", 1, active, eth, map[int]gidEntry{1: {gidLinkLocal, "RoCE v2"}, 2: {gidIPv6, "RoCE v2"}}),
			master: loopback,
			want:   Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1"},
		},
		{
			name: "gid of the socket interface's address preferred",
			files: port("mlx5_0", 1, active, eth, map[int]gidEntry{
				3: {gidV4, "RoCE v2"}, 7: {gidLoopback, "RoCE v2"}, 8: {gidLoopback, "RoCE v1"},
			}),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1", IBGIDIndex: "7"},
			wantWhy: "the socket interface's address",
		},
		{
			name: "index shared by most ports",
			files: merge(
				port("mlx5_0", 1, active, eth, map[int]gidEntry{3: {gidV4, "RoCE v2"}}),
				port("mlx5_1", 1, active, eth, map[int]gidEntry{3: {gidV4Other, "RoCE v2"}}),
				port("mlx5_2", 1, active, eth, map[int]gidEntry{5: {gidV4Other, "RoCE v2"}}),
			),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1,mlx5_1:1,mlx5_2:1", IBGIDIndex: "3"},
			wantWhy: "2 of 3 ports",
		},
		{
			name:    "infiniband and roce: infiniband alone",
			files:   merge(port("mlx5_0", 1, active, ib, nil), port("mlx5_1", 1, active, eth, mlxGIDs)),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_0:1"},
			wantWhy: "RoCE ports mlx5_1:1 left out",
		},
		{
			name: "user's hca narrows the gid choice",
			files: merge(
				port("mlx5_1", 1, active, eth, map[int]gidEntry{3: {gidV4, "RoCE v2"}}),
				port("mlx5_10", 1, active, eth, map[int]gidEntry{5: {gidV4Other, "RoCE v2"}}),
			),
			master:  loopback,
			user:    map[string]string{"NCCL_IB_HCA": "=mlx5_10:1"},
			want:    Result{SocketIfname: "=lo", IBGIDIndex: "5"},
			wantWhy: "set by the user",
		},
		{
			name:   "user's gid index and socket ifname left alone",
			files:  port("mlx5_0", 1, active, eth, mlxGIDs),
			master: loopback,
			user:   map[string]string{"NCCL_IB_GID_INDEX": "1", "NCCL_SOCKET_IFNAME": "lo"},
			want:   Result{IBHCA: "=mlx5_0:1"},
		},
		{
			name:    "user disabled infiniband",
			files:   port("mlx5_0", 1, active, eth, mlxGIDs),
			master:  loopback,
			user:    map[string]string{"NCCL_IB_DISABLE": "1"},
			want:    Result{SocketIfname: "=lo"},
			wantWhy: "NCCL_IB_DISABLE=1",
		},
		{
			name: "odd files tolerated",
			files: merge(
				port("mlx5_0", 1, "ACTIVE", ib, nil),
				port("mlx5_1", 1, active, "Unknown", nil),
				port("mlx5_2", 1, active, eth, map[int]gidEntry{3: {strings.Repeat("0", 200), "RoCE v2"}, 4: {"ffff", "RoCE v2"}, 6: {gidV4, "RoCE v2"}}),
				map[string]string{
					"class/infiniband/mlx5_3/ports/1/state":  active,   // no link_layer
					"class/infiniband/mlx5_4/ports/x/state":  active,   // not a port
					"class/infiniband/mlx5 5/ports/1/state":  active,   // odd name
					"class/infiniband/mlx5_6/ports":          "a file", // not a directory
					"class/infiniband/mlx5_2/ports/1/gids/x": gidV4,    // not an index
				},
			),
			master:  loopback,
			want:    Result{SocketIfname: "=lo", IBHCA: "=mlx5_2:1", IBGIDIndex: "6"},
			wantWhy: "mlx5_0:1: port state",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.master == loopback && runtime.GOOS != "linux" {
				t.Skip("loopback is lo on Linux only")
			}
			got, err := Detect(Options{SysRoot: sysTree(t, tc.files), MasterAddr: tc.master, NCCLVersion: tc.version, UserEnv: tc.user})
			if err != nil {
				t.Fatal(err)
			}
			if got.SocketIfname != tc.want.SocketIfname || got.IBHCA != tc.want.IBHCA || got.IBGIDIndex != tc.want.IBGIDIndex {
				t.Errorf("got %q %q %q, want %q %q %q\nreasons:\n%s", got.SocketIfname, got.IBHCA, got.IBGIDIndex,
					tc.want.SocketIfname, tc.want.IBHCA, tc.want.IBGIDIndex, strings.Join(got.Reasons, "\n"))
			}
			if tc.wantWhy != "" && !strings.Contains(strings.Join(got.Reasons, "\n"), tc.wantWhy) {
				t.Errorf("no reason says %q:\n%s", tc.wantWhy, strings.Join(got.Reasons, "\n"))
			}
			for _, name := range []string{EnvNCCLSocketIfname, EnvNCCLIBHCA, EnvNCCLIBGIDIndex} {
				if !strings.Contains(strings.Join(got.Reasons, "\n"), name) {
					t.Errorf("no reason for %s:\n%s", name, strings.Join(got.Reasons, "\n"))
				}
			}
		})
	}
}

func TestDetectNCCLNetBadMaster(t *testing.T) {
	for _, a := range []string{"0.0.0.0", "::", "224.0.0.1"} {
		if _, err := Detect(Options{SysRoot: t.TempDir(), MasterAddr: netip.MustParseAddr(a)}); err == nil {
			t.Errorf("master %s: no error", a)
		}
	}
}

// TestDetectNCCLNetRoute asks the real kernel: the master on this node's own
// non-loopback address, and a neighbour in that address's subnet, both give
// the interface holding the address.
func TestDetectNCCLNetRoute(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	tested := 0
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil {
				continue
			}
			own, _ := netip.AddrFromSlice(ipn.IP.To4())
			ones, _ := ipn.Mask.Size()
			if ones > 30 {
				continue
			}
			neighbour := netip.PrefixFrom(own, ones).Masked().Addr().Next()
			if neighbour == own {
				neighbour = neighbour.Next()
			}
			for _, master := range []netip.Addr{own, neighbour} {
				got, err := Detect(Options{SysRoot: t.TempDir(), MasterAddr: master})
				if err != nil {
					t.Fatal(err)
				}
				if got.SocketIfname != "="+ifc.Name {
					t.Errorf("master %s: got %q, want %q\n%s", master, got.SocketIfname, "="+ifc.Name, strings.Join(got.Reasons, "\n"))
				}
			}
			tested++
		}
	}
	if tested == 0 {
		t.Skip("no non-loopback IPv4 interface with a subnet")
	}
}

func TestNCCLNetList(t *testing.T) {
	tests := []struct {
		spec string
		dev  string
		port int
		want bool
	}{
		{"", "mlx5_0", 1, true},
		{"mlx5_1", "mlx5_10", 1, true}, // a prefix
		{"=mlx5_1", "mlx5_10", 1, false},
		{"=mlx5_1", "mlx5_1", 1, true},
		{"=mlx5_0:1,mlx5_1:1", "mlx5_1", 1, true},
		{"=mlx5_0:1,mlx5_1:1", "mlx5_1", 2, false},
		{"=mlx5_0:1,mlx5_1:1", "mlx5_10", 1, false},
		{"mlx5_0:1,mlx5_1:1", "mlx5_10", 1, true},
		{"^mlx5_1", "mlx5_10", 1, false},
		{"^=mlx5_1", "mlx5_10", 1, true},
		{"^=mlx5_1", "mlx5_1", 1, false},
		{"^", "mlx5_0", 1, false},
		{"=eth0", "eth0", -1, true},
		{"=eth0", "eth01", -1, false},
		{"eth", "eth1", -1, true},
		{",,=x", "=x", 1, true}, // "=" only counts at the front
		{"mlx5_0:", "mlx5_0", 2, true},
		{"mlx5_0:1x", "mlx5_0", 1, true}, // atoi reads the leading digits
	}
	for _, tc := range tests {
		if got := parseNCCLList(tc.spec).match(tc.dev, tc.port); got != tc.want {
			t.Errorf("%q matches %s:%d = %v, want %v", tc.spec, tc.dev, tc.port, got, tc.want)
		}
	}
}

func TestNCCLNetVersion(t *testing.T) {
	tests := []struct {
		s    string
		code int
		bad  bool
	}{
		{s: "2.28.9", code: 22809},
		{s: "2.20.5", code: 22005},
		{s: "2.21.0", code: 22100},
		{s: "2.8.4", code: 2804},
		{s: "2.28", bad: true},
		{s: "3.0.0", bad: true},
		{s: "2.x.1", bad: true},
		{s: "2.100.1", bad: true},
	}
	for _, tc := range tests {
		code, err := ParseVersion(tc.s)
		if (err != nil) != tc.bad || code != tc.code {
			t.Errorf("ParseVersion(%q) = %d, %v", tc.s, code, err)
		}
		if !tc.bad {
			if got := formatNCCLVersion(code); got != tc.s {
				t.Errorf("formatNCCLVersion(%d) = %q, want %q", code, got, tc.s)
			}
		}
	}
	if got := formatNCCLVersion(0); got != "unknown" {
		t.Errorf("formatNCCLVersion(0) = %q", got)
	}
}

func TestNCCLNetParsers(t *testing.T) {
	states := []struct {
		in   string
		n    int
		name string
		bad  bool
	}{
		{in: "4: ACTIVE\n", n: 4, name: "ACTIVE"},
		{in: "1: DOWN", n: 1, name: "DOWN"},
		{in: "5: ACTIVE_DEFER\n", n: 5, name: "ACTIVE_DEFER"},
		{in: "ACTIVE", bad: true},
		{in: "x: ACTIVE", bad: true},
		{in: "04: ACTIVE", bad: true},
		{in: "4: ", bad: true},
		{in: "4: active", bad: true},
		{in: "-4: ACTIVE", bad: true},
	}
	for _, tc := range states {
		n, name, err := parsePortState([]byte(tc.in))
		if (err != nil) != tc.bad || n != tc.n || name != tc.name {
			t.Errorf("parsePortState(%q) = %d, %q, %v", tc.in, n, name, err)
		}
	}

	gids := []struct {
		in  string
		v4  string // "" when not an IPv4-mapped GID
		bad bool
	}{
		{in: gidV4 + "\n", v4: "10.1.0.5"},
		{in: strings.ToUpper(gidV4), v4: "10.1.0.5"},
		{in: gidLinkLocal},
		{in: gidIPv6},
		{in: gidUnset},
		{in: "0000:0000:0000:0000:0000:ffff:0000:0000"}, // 0.0.0.0
		{in: "::ffff:10.1.0.5", bad: true},
		{in: "0000:0000:0000:0000:0000:ffff:0a01:005", bad: true},
		{in: "0000:0000:0000:0000:0000:ffff:0a01:00050", bad: true},
		{in: "0000-0000:0000:0000:0000:ffff:0a01:0005", bad: true},
		{in: "0000:0000:0000:0000:0000:ffff:0a01:000g", bad: true},
		{in: "+000:0000:0000:0000:0000:ffff:0a01:0005", bad: true},
	}
	for _, tc := range gids {
		gid, err := parseGID([]byte(tc.in))
		if (err != nil) != tc.bad {
			t.Errorf("parseGID(%q): %v", tc.in, err)
			continue
		}
		got := ""
		if ip, ok := ipv4OfGID(gid); ok {
			got = ip.String()
		}
		if !tc.bad && got != tc.v4 {
			t.Errorf("parseGID(%q): IPv4 %q, want %q", tc.in, got, tc.v4)
		}
	}

	types := map[string]int{"IB/RoCE v1\n": 1, "RoCE v1": 1, "RoCE v2\n": 2, "": 0, "RoCE v3": 0}
	for in, want := range types {
		if got := parseGIDType([]byte(in)); got != want {
			t.Errorf("parseGIDType(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestNCCLNetReadSmall(t *testing.T) {
	root := sysTree(t, map[string]string{"short": "4: ACTIVE\n", "long": strings.Repeat("x", maxSysfsFile+1)})
	if b, err := readSmall(filepath.Join(root, "short")); err != nil || string(b) != "4: ACTIVE\n" {
		t.Errorf("short file: %q, %v", b, err)
	}
	if _, err := readSmall(filepath.Join(root, "long")); err == nil {
		t.Error("long file read without error")
	}
	if _, err := readSmall(filepath.Join(root, "missing")); err == nil {
		t.Error("missing file read without error")
	}
}

func TestNCCLNetUserVars(t *testing.T) {
	got := UserVars([]string{"NCCL_DEBUG=INFO", "PATH=/bin", "NCCL_IB_HCA==mlx5_0:1", "NCCL_EMPTY=", "NCCLX=1", "NCCL_BROKEN", "NCCL_VERSION=2.28.3-1"})
	want := map[string]string{"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_EMPTY": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func FuzzNCCLNetGID(f *testing.F) {
	for _, s := range []string{gidV4, gidLinkLocal, gidIPv6 + "\n", "::1", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gid, err := parseGID(b)
		if err != nil {
			return
		}
		// What parses is the kernel's form: writing it back gives the input.
		var groups []string
		for i := 0; i < 16; i += 2 {
			groups = append(groups, fmt.Sprintf("%02x%02x", gid[i], gid[i+1]))
		}
		if back := strings.Join(groups, ":"); !strings.EqualFold(back, strings.TrimSpace(string(b))) {
			t.Errorf("parseGID(%q) gives %s", b, back)
		}
		if ip, ok := ipv4OfGID(gid); ok && (!ip.Is4() || ip.IsUnspecified()) {
			t.Errorf("parseGID(%q): IPv4 %s", b, ip)
		}
	})
}

func FuzzNCCLNetPortState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE\n", "1: DOWN", "x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, name, err := parsePortState(b)
		if err != nil {
			return
		}
		if back := fmt.Sprintf("%d: %s", n, name); back != strings.TrimSpace(string(b)) || n < 0 || n > 255 {
			t.Errorf("parsePortState(%q) = %d, %q", b, n, name)
		}
		parseGIDType(b)
	})
}
