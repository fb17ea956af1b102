package topology

import (
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr string
	}{
		{"", BindNone, ""},
		{"none", BindNone, ""},
		{"numa", BindNUMA, ""},
		{"node", BindNUMA, ""},
		{"socket", BindSocket, ""},
		{"cores", BindCores, ""},
		{"exclusive", BindCores, ""},
		{"core-complex", "", "not supported: use cores"},
		{"NUMA", "", "not a binding"},
		{"closest", "", "want none, numa, socket or cores"},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, an error saying %q", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"", "numa", "exclusive", "core-complex", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if err == nil && m != BindNone && m != BindNUMA && m != BindSocket && m != BindCores {
			t.Fatalf("ParseMode(%q) = %q, not a mode", s, m)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Fatalf("error of %d bytes", len(err.Error()))
		}
	})
}

// The bindings a reader chooses by hand for each fixture's layout: each
// worker's CPUs, its cores to itself (Threads) and what the note says.
func TestBind(t *testing.T) {
	dgx := Read(dgxH100(t, "0-223", "/", "0-223"))
	pod := Read(dgxH100(t, "0-223", "/kubepods/pod1/c1", "0-7,112-119"))
	vm := Read(oneSocket4GPU(t))
	smt := Read(smtNode(t))
	snc := Read(sncNode(t))
	bare := Read(container(t))
	eight := [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}
	type want struct {
		cpus    string
		threads int
		note    string
	}
	// every gives each of n workers the same binding.
	every := func(n int, w want) []want {
		out := make([]want, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	tests := []struct {
		name string
		topo *Topology
		mode Mode
		gpus [][]int
		want []want
	}{
		{"dgx none is the numa hint", dgx, BindNone, [][]int{{0}, {7}}, []want{{dgxNode0, 0, ""}, {dgxNode1, 0, ""}}},
		{"dgx numa: 4 workers a node share it", dgx, BindNUMA, eight, append(every(4, want{dgxNode0, 14, ""}), every(4, want{dgxNode1, 14, ""})...)},
		{"dgx socket is its node", dgx, BindSocket, [][]int{{0}, {4}}, []want{{dgxNode0, 56, ""}, {dgxNode1, 56, ""}}},
		{"dgx cores: 14 cores each, siblings together", dgx, BindCores, eight, []want{
			{"0-13,112-125", 14, ""}, {"14-27,126-139", 14, ""}, {"28-41,140-153", 14, ""}, {"42-55,154-167", 14, ""},
			{"56-69,168-181", 14, ""}, {"70-83,182-195", 14, ""}, {"84-97,196-209", 14, ""}, {"98-111,210-223", 14, ""}}},
		{"dgx cores: one worker with all 8 GPUs", dgx, BindCores, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}, []want{{"0-223", 112, ""}}},
		{"dgx cores: a worker spanning both nodes takes what is left", dgx, BindCores, [][]int{{0}, {1}, {2, 5}}, []want{
			{"0-27,112-139", 28, ""}, {"28-55,140-167", 28, ""}, {"56-111,168-223", 56, ""}}},
		{"pod cpuset: cores within it", pod, BindCores, [][]int{{0}, {1}, {2}, {3}}, []want{
			{"0-1,112-113", 2, ""}, {"2-3,114-115", 2, ""}, {"4-5,116-117", 2, ""}, {"6-7,118-119", 2, ""}}},
		{"pod cpuset on the other socket's GPUs: all allowed, shared", pod, BindCores, [][]int{{4}, {5}}, []want{
			{"0-3,112-115", 4, "hold none of NUMA node 1"}, {"4-7,116-119", 4, "hold none of NUMA node 1"}}},
		{"vm without numa nodes: numa is everything", vm, BindNUMA, [][]int{{0}, {1}, {2}, {3}}, every(4, want{"0-63", 16, "no NUMA node"})},
		{"vm without numa nodes: cores split all", vm, BindCores, [][]int{{0}, {1}, {2}, {3}}, []want{
			{"0-15", 16, "a share of the allowed CPUs"}, {"16-31", 16, "a share of the allowed CPUs"},
			{"32-47", 16, "a share of the allowed CPUs"}, {"48-63", 16, "a share of the allowed CPUs"}}},
		{"smt: siblings kept together", smt, BindCores, [][]int{{0}, {0}, {0}}, []want{{"0,4", 1, ""}, {"1,5", 1, ""}, {"2-3,6-7", 2, ""}}},
		{"more workers than cores share, never empty", smt, BindCores, [][]int{{0}, {0}, {0}, {0}, {0}, {0}}, []want{
			{"0,4", 1, "6 workers share 4 cores"}, {"1,5", 1, "6 workers share 4 cores"}, {"2,6", 1, "6 workers share 4 cores"},
			{"3,7", 1, "6 workers share 4 cores"}, {"0,4", 1, "6 workers share 4 cores"}, {"1,5", 1, "6 workers share 4 cores"}}},
		{"snc: socket spans two numa nodes", snc, BindSocket, [][]int{{0}, {3}}, []want{{"0-7", 8, ""}, {"8-15", 8, ""}}},
		{"snc: numa is the node", snc, BindNUMA, [][]int{{1}}, []want{{"4-7", 4, ""}}},
		{"cpu workers: cores split all allowed", bare, BindCores, [][]int{nil, nil}, []want{
			{"0-1", 2, "no GPUs: a share of the allowed CPUs"}, {"2-3", 2, "no GPUs: a share of the allowed CPUs"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Bind(tt.topo, VendorNVIDIA, tt.mode, tt.gpus, nil)
			if len(got) != len(tt.want) {
				t.Fatalf("%d bindings, want %d", len(got), len(tt.want))
			}
			for i, b := range got {
				w := tt.want[i]
				if b.CPUs.String() != w.cpus || b.Threads != w.threads || (w.note == "") != (b.Note == "") || !strings.Contains(b.Note, w.note) {
					t.Errorf("worker %d: CPUs %s, %d threads, note %q; want %s, %d, one saying %q", i, b.CPUs, b.Threads, b.Note, w.cpus, w.threads, w.note)
				}
			}
		})
	}
}

// cores binds a job away from the cores other jobs' workers hold while
// enough are free, and shares theirs, saying so, when not.
func TestBindAvoidsOtherJobs(t *testing.T) {
	dgx := Read(dgxH100(t, "0-223", "/", "0-223"))
	smt := Read(smtNode(t))
	for _, tt := range []struct {
		name string
		topo *Topology
		gpus [][]int
		busy string
		cpus []string
		note string
	}{
		{"free cores left: none shared", dgx, [][]int{{0}, {1}}, "0-13,112-125", []string{"14-34,126-146", "35-55,147-167"}, ""},
		{"one CPU of a core is enough to leave it", smt, [][]int{{0}}, "0", []string{"1-3,5-7"}, ""},
		{"every core busy: shared, with a note", smt, [][]int{{0}, {0}}, "0-7", []string{"0-1,4-5", "2-3,6-7"}, "cores shared with another job's workers"},
		{"too few free: shared, with a note", smt, [][]int{{0}, {0}}, "0-2,4-6", []string{"0-1,4-5", "2-3,6-7"}, "cores shared with another job's workers"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			busy, err := ParseCPUList(tt.busy)
			if err != nil {
				t.Fatal(err)
			}
			for i, b := range Bind(tt.topo, VendorNVIDIA, BindCores, tt.gpus, busy) {
				if b.CPUs.String() != tt.cpus[i] || (tt.note == "") != !strings.Contains(b.Note, "another job") || !strings.Contains(b.Note, tt.note) {
					t.Errorf("worker %d: CPUs %s, note %q; want %s, a note saying %q", i, b.CPUs, b.Note, tt.cpus[i], tt.note)
				}
			}
		})
	}
}

// No binding leaves the allowed CPUs, and none is empty, whatever the mix
// of workers and GPUs.
func TestBindStaysAllowed(t *testing.T) {
	topos := map[string]*Topology{"dgx": Read(dgxH100(t, "0-7,60-63", "/", "0-223")), "smt": Read(smtNode(t)), "snc": Read(sncNode(t))}
	for name, topo := range topos {
		for _, mode := range Modes {
			for n := 1; n <= 20; n++ {
				gpus := make([][]int, n)
				for i := range gpus {
					gpus[i] = []int{i % max(1, len(topo.GPUs))}
				}
				for i, b := range Bind(topo, VendorNVIDIA, mode, gpus, nil) {
					if len(b.CPUs) == 0 || len(b.CPUs.Intersect(topo.Allowed)) != len(b.CPUs) {
						t.Errorf("%s %s %d workers: worker %d bound to %s, allowed %s", name, mode, n, i, b.CPUs, topo.Allowed)
					}
				}
			}
		}
	}
}

// UCX names an RDMA device with its port: the fixtures' ConnectX devices
// have port 1; an Ethernet NIC has none.
func TestNICPort(t *testing.T) {
	dgx := Read(dgxH100(t, "0-223", "/", "0-223"))
	for _, n := range dgx.NICs {
		if want := map[string]int{NICRDMA: 1, NICEthernet: 0}[n.Kind]; n.Port != want {
			t.Errorf("%s (%s): port %d, want %d", n.Name, n.Kind, n.Port, want)
		}
	}
}
