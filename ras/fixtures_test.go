package ras

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func member(rank, gpu, pid int, node string, launched int64) Member {
	return Member{CommRank: rank, GPU: gpu, NVMLGPU: gpu, PID: pid, Node: node, Launched: launched}
}

// parseFixture reads testdata/name with the parser its extension names.
func parseFixture(t testing.TB, name string) *Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var r *Report
	if strings.HasSuffix(name, ".json") {
		r, err = ParseJSON(b)
	} else {
		r, err = ParseText(b)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// fixtures lists every report in testdata with what it must give: the
// status of each communicator listed, the culprits, and any more checks.
var fixtures = []struct {
	file     string
	version  string
	statuses []string
	culprits []Culprit
	check    func(t *testing.T, r *Report)
}{
	{
		file: "nccl-2.24.3-mismatch.txt", version: "2.24.3", statuses: []string{"MISMATCH"},
		culprits: []Culprit{{Comm: "5974ff3706582d81", Op: "collective", Member: member(2, 2, 1083, "192.0.2.2", 20), OthersLaunched: 21}},
		check: func(t *testing.T, r *Report) {
			c := r.Comms[0]
			if c.Label != "#0-0" || c.Size != 4 || c.State != "RUNNING" || c.Op != "collective" || c.Launched != 21 {
				t.Errorf("comm %+v", c)
			}
		},
	},
	{
		file: "nccl-2.24.3-nocomms.txt", version: "2.24.3",
		check: func(t *testing.T, r *Report) {
			if r.Nodes != 2 || r.Processes != 6 || r.GPUs != 6 || len(r.Groups) != 0 || !r.Complete {
				t.Errorf("report %+v", r)
			}
		},
	},
	{
		file: "nccl-2.25.1-incomplete.txt", version: "2.25.1", statuses: []string{"INCOMPLETE"},
		// Before 2.26 NCCL names a missing rank without its process.
		culprits: []Culprit{{Comm: "a3c1e07f4b9d2256", Member: Member{CommRank: 6, GPU: -1, NVMLGPU: -1}, Missing: true}},
		check: func(t *testing.T, r *Report) {
			want := []Process{{PID: 2203, Node: "10.0.0.2", GPUs: []int{2}, NVMLGPUs: []int{2}}}
			if !reflect.DeepEqual(r.MissingProcesses, want) || r.MissingProcessCount != 1 || r.Timeouts != 1 {
				t.Errorf("missing %+v (%d), timeouts %d", r.MissingProcesses, r.MissingProcessCount, r.Timeouts)
			}
			if g := r.Groups[0]; g.RanksPerNode != "3-4" || g.Size != 8 || g.Ranks != 7 {
				t.Errorf("group %+v", g)
			}
		},
	},
	{
		file: "nccl-2.26.2-dead.txt", version: "2.26.2", statuses: []string{"INCOMPLETE"},
		culprits: []Culprit{{Comm: "1f7d2c90e4a8b613", Member: member(3, 1, 3301, "10.0.0.2", 0), Missing: true}},
		check: func(t *testing.T, r *Report) {
			if len(r.DeadProcesses) != 1 || r.DeadProcessCount != 1 || r.DeadProcesses[0].PID != 3301 || r.MissingProcessCount != 0 {
				t.Errorf("dead %+v (%d), missing %d", r.DeadProcesses, r.DeadProcessCount, r.MissingProcessCount)
			}
		},
	},
	{
		file: "nccl-2.27.7-mismatch-first-op.txt", version: "2.27.7", statuses: []string{"MISMATCH"},
		// Behind in Broadcast and AllReduce: named once, for the first.
		culprits: []Culprit{{Comm: "8e2b4f71c09a3d56", Op: "Broadcast", Member: member(3, 3, 5104, "10.1.0.5", 1), OthersLaunched: 2}},
		check: func(t *testing.T, r *Report) {
			ops := r.Comms[0].Ops
			if len(ops) != 2 || ops[1].Op != "AllReduce" || ops[1].Launched != 1 || ops[1].Behind[0].Launched != 0 {
				t.Errorf("ops %+v", ops)
			}
		},
	},
	{
		file: "nccl-2.28.3-status.txt", version: "2.28.3", statuses: []string{"ERROR,MISMATCH", "MISMATCH"},
		check: func(t *testing.T, r *Report) {
			a, b := r.Comms[0], r.Comms[1]
			if a.State != "ABORT" || len(a.StatusOutliers) != 1 || a.StatusOutliers[0].Status != "ABORT" {
				t.Errorf("comm #0-0 %+v", a)
			}
			if len(a.Errors) != 1 || a.Errors[0].Error != "Remote process error" || a.Errors[0].PID != 5102 {
				t.Errorf("errors %+v", a.Errors)
			}
			if b.Label != "#1-0" || len(b.StatusOutliers) != 1 || b.StatusOutliers[0].Status != "NOCOMM" || b.StatusOutliers[0].CommRank != 1 {
				t.Errorf("comm #1-0 %+v", b)
			}
		},
	},
	{
		file: "nccl-2.28.9-behind-several.txt", version: "2.28.9", statuses: []string{"MISMATCH"},
		culprits: []Culprit{
			{Comm: "6a0f3b8e91d2c475", Op: "AllReduce", Member: member(1, 1, 2102, "10.0.0.1", 20), OthersLaunched: 21},
			{Comm: "6a0f3b8e91d2c475", Op: "AllReduce", Member: member(5, 1, 2202, "10.0.0.2", 20), OthersLaunched: 21},
			{Comm: "6a0f3b8e91d2c475", Op: "AllReduce", Member: member(6, 2, 2203, "10.0.0.2", 20), OthersLaunched: 21},
		},
	},
	{
		// STATUS without VERBOSE names no rank of 3 behind out of 8.
		file: "nccl-2.28.9-behind-several-terse.txt", version: "2.28.9", statuses: []string{"MISMATCH"},
		check: func(t *testing.T, r *Report) {
			if op := r.Comms[0].Ops[0]; op.BehindRanks != 3 || op.Launched != 21 || len(op.Behind) != 0 {
				t.Errorf("op %+v", op)
			}
		},
	},
	{
		file: "nccl-2.28.9-healthy.txt", version: "2.28.9",
		check: func(t *testing.T, r *Report) {
			if len(r.Groups) != 2 || r.Groups[1].Comms != 4 || r.Groups[1].Status != "OK" {
				t.Errorf("groups %+v", r.Groups)
			}
		},
	},
	{
		file: "nccl-2.28.9-incomplete.json", version: "2.28.9", statuses: []string{"INCOMPLETE"},
		culprits: []Culprit{{Comm: "e6b0a4d1953c7f28", Member: member(2, 2, 1722, "192.0.2.2", 0), Missing: true}},
		check: func(t *testing.T, r *Report) {
			want := []Process{{PID: 1722, Node: "192.0.2.2", GPUs: []int{2}, NVMLGPUs: []int{2}}}
			if !reflect.DeepEqual(r.MissingProcesses, want) || r.Timeouts != 1 {
				t.Errorf("missing %+v, timeouts %d", r.MissingProcesses, r.Timeouts)
			}
		},
	},
	{
		file: "nccl-2.28.9-incomplete.txt", version: "2.28.9", statuses: []string{"INCOMPLETE"},
		culprits: []Culprit{{Comm: "e6b0a4d1953c7f28", Member: member(2, 2, 1722, "192.0.2.2", 0), Missing: true}},
		check: func(t *testing.T, r *Report) {
			want := []Process{{PID: 1722, Node: "192.0.2.2", GPUs: []int{2}, NVMLGPUs: []int{2}}}
			if !reflect.DeepEqual(r.MissingProcesses, want) || r.Timeouts != 1 {
				t.Errorf("missing %+v, timeouts %d", r.MissingProcesses, r.Timeouts)
			}
		},
	},
	{
		file: "nccl-2.28.9-mismatch.json", version: "2.28.9", statuses: []string{"MISMATCH"},
		culprits: []Culprit{{Comm: "5974ff3706582d81", Op: "AllReduce", Member: member(2, 2, 1083, "192.0.2.2", 20), OthersLaunched: 21}},
	},
	{
		file: "nccl-2.28.9-mismatch.txt", version: "2.28.9", statuses: []string{"MISMATCH"},
		culprits: []Culprit{{Comm: "5974ff3706582d81", Op: "AllReduce", Member: member(2, 2, 1083, "192.0.2.2", 20), OthersLaunched: 21}},
	},
	{
		// Comm rank 1 of the pair is job rank 7, CUDA device 0 of its process, NVML 3.
		file: "nccl-2.28.9-subcomm.txt", version: "2.28.9", statuses: []string{"MISMATCH"},
		culprits: []Culprit{{Comm: "b93e07c5d4a1f26e", Op: "AllGather",
			Member: Member{CommRank: 1, GPU: 0, NVMLGPU: 3, PID: 2204, Node: "10.0.0.2", Launched: 50}, OthersLaunched: 51}},
		check: func(t *testing.T, r *Report) {
			if c := r.Comms[0]; c.Label != "#1-0" || c.Size != 2 {
				t.Errorf("comm %+v", c)
			}
		},
	},
	{
		file: "nccl-2.29.2-nocomms.json", version: "2.29.2",
	},
	{
		file: "nccl-2.29.7-subcomm.json", version: "2.29.7", statuses: []string{"OK", "OK", "MISMATCH", "OK", "MISMATCH"},
		culprits: []Culprit{{Comm: "b93e07c5d4a1f26e", Op: "AllGather",
			Member: Member{CommRank: 1, GPU: 0, NVMLGPU: 3, PID: 2204, Node: "10.0.0.2", Launched: 50}, OthersLaunched: 51}},
		check: func(t *testing.T, r *Report) {
			if id := r.Comms[1].ID; id != "09d3e5a7c21b4f08" {
				t.Errorf("hash printed without its leading 0 read as %q", id)
			}
			want := []Member{{CommRank: 1, GPU: 0, NVMLGPU: 1, PID: 2202, Node: "10.0.0.2", Status: "NOCOMM"}}
			if got := r.Comms[2].StatusOutliers; !reflect.DeepEqual(got, want) {
				t.Errorf("NOCOMM rank %+v", got)
			}
		},
	},
	{
		file: "nccl-2.30.7-dead.json", version: "2.30.7", statuses: []string{"INCOMPLETE,ERROR"},
		culprits: []Culprit{{Comm: "1f7d2c90e4a8b613", Member: member(3, 3, 3024, "10.2.0.7", 0), Missing: true}},
		check: func(t *testing.T, r *Report) {
			if len(r.DeadProcesses) != 1 || len(r.MissingProcesses) != 0 || r.Timeouts != 2 {
				t.Errorf("dead %+v, missing %+v", r.DeadProcesses, r.MissingProcesses)
			}
			if e := r.Comms[0].Errors; len(e) != 1 || e[0].CommRank != 1 || e[0].Error != "Remote process error" {
				t.Errorf("errors %+v", e)
			}
		},
	},
	{
		file: "nccl-2.30.7-healthy.json", version: "2.30.7", statuses: []string{"OK"},
	},
	{
		// 2 of 4 behind: NCCL names neither half.
		file: "nccl-2.30.7-mismatch-halves.txt", version: "2.30.7", statuses: []string{"MISMATCH"},
		check: func(t *testing.T, r *Report) {
			if op := r.Comms[0].Ops[0]; op.BehindRanks != 2 || op.Launched != 21 {
				t.Errorf("op %+v", op)
			}
		},
	},
}

func TestFixtures(t *testing.T) {
	for _, tt := range fixtures {
		t.Run(tt.file, func(t *testing.T) {
			r := parseFixture(t, tt.file)
			if r.NCCLVersion != tt.version {
				t.Errorf("version %q, want %q", r.NCCLVersion, tt.version)
			}
			if !r.Complete || r.Truncated {
				t.Errorf("complete %v, truncated %v", r.Complete, r.Truncated)
			}
			var statuses []string
			for _, c := range r.Comms {
				statuses = append(statuses, c.Status)
			}
			if !reflect.DeepEqual(statuses, tt.statuses) {
				t.Errorf("statuses %q, want %q", statuses, tt.statuses)
			}
			if got := r.Culprits(); !reflect.DeepEqual(got, tt.culprits) {
				t.Errorf("culprits\n got %+v\nwant %+v", got, tt.culprits)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestFixturesListed keeps the table above in step with testdata.
func TestFixturesListed(t *testing.T) {
	listed := make(map[string]bool)
	for _, tt := range fixtures {
		listed[tt.file] = true
	}
	for _, pattern := range []string{"testdata/*.txt", "testdata/*.json"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !listed[filepath.Base(f)] {
				t.Errorf("%s is not in the fixtures table", f)
			}
		}
	}
}

// The same hang read as text and as JSON names the same culprits.
func TestTextAndJSONAgree(t *testing.T) {
	for _, name := range []string{"nccl-2.28.9-mismatch", "nccl-2.28.9-incomplete"} {
		text := parseFixture(t, name+".txt").Culprits()
		js := parseFixture(t, name+".json").Culprits()
		if !reflect.DeepEqual(text, js) {
			t.Errorf("%s: text %+v, JSON %+v", name, text, js)
		}
	}
}
