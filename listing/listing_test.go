package listing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/musterhq/muster/hostfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestParseFormat(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{"", "table", ""},
		{"table", "table", ""},
		{"wide", "wide", ""},
		{"json", "json", ""},
		{"yaml", "yaml", ""},
		{"JSON", "", `-o/--output: unknown format "JSON" (want table, wide, json or yaml)`},
		{"xml", "", `-o/--output: unknown format "xml" (want table, wide, json or yaml)`},
	} {
		got, err := ParseFormat(tt.in)
		if string(got) != tt.want || (err == nil) != (tt.err == "") || (err != nil && err.Error() != tt.err) {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func FuzzParseFormat(f *testing.F) {
	for _, s := range []string{"", "table", "wide", "json", "yaml", "yml", "-o", "json\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseFormat(s)
		if err != nil {
			if !strings.Contains(err.Error(), "-o/--output") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if s != "" && string(got) != s {
			t.Fatalf("ParseFormat(%q) = %q", s, got)
		}
	})
}

func testNodes() []*musterv1.NodeStatus {
	return []*musterv1.NodeStatus{
		{Node: &musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1, Version: "v1", Cpus: 8, Gpus: []*musterv1.GPU{
			{Index: 0, Uuid: "GPU-0", Name: "H100", MemoryBytes: 80 << 30}, {Index: 1, Uuid: "GPU-1", Name: "H100"}}},
			BusyGpus: []int32{1}, Jobs: []string{"j-1"}, Gossip: "alive"},
		{Node: &musterv1.Node{Name: "b", Addr: "10.0.0.2", Rank: 3}, Gossip: "alive", Leaving: true},
		{Node: &musterv1.Node{Name: "c", Addr: "10.0.0.3", Rank: -1}, Gossip: "alive", NotRegistered: true},
		{Node: &musterv1.Node{Name: "d", Addr: "10.0.0.4", Rank: -1}, Gossip: "alive", Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED},
		{Node: &musterv1.Node{Name: "e", Addr: "10.0.0.5", Rank: -1}, Gossip: "alive", Jobs: []string{"j-2"},
			Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED},
		{Node: &musterv1.Node{Name: "f", Rank: -1}, NotRegistered: true, Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED},
	}
}

// decode reads what Write wrote in f into a generic value.
func decode(t *testing.T, f Format, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	var err error
	if f == JSON {
		err = json.Unmarshal(b, &v)
	} else {
		err = yaml.Unmarshal(b, &v)
	}
	if err != nil {
		t.Fatalf("%s output does not parse: %v\n%s", f, err, b)
	}
	return v
}

func TestNodesSerialized(t *testing.T) {
	for _, f := range []Format{JSON, YAML} {
		t.Run(string(f), func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteNodes(&b, f, Nodes(testNodes())); err != nil {
				t.Fatal(err)
			}
			v := decode(t, f, b.Bytes())
			items, _ := v["items"].([]any)
			if v["apiVersion"] != "muster/v1" || v["kind"] != "NodeList" || len(items) != 6 {
				t.Fatalf("%s: %v", f, v)
			}
			a := items[0].(map[string]any)
			// YAML and JSON read numbers differently; compare as text.
			for k, want := range map[string]string{"kind": "Node", "name": "a", "address": "10.0.0.1", "rank": "<nil>",
				"gossip": "alive", "registered": "true", "leaving": "false", "gpus": "2", "freeGpus": "1", "busyGpus": "[1]",
				"cpus": "8", "version": "v1", "jobs": "[j-1]", "gpuError": "", "schedule": "schedulable"} {
				if got := fmtAny(a[k]); got != want {
					t.Errorf("%s: a's %s = %s, want %s", f, k, got, want)
				}
			}
			dev := a["gpuDevices"].([]any)[0].(map[string]any)
			if fmtAny(dev["uuid"]) != "GPU-0" || fmtAny(dev["memoryBytes"]) != "85899345920" {
				t.Errorf("%s: GPU %v", f, dev)
			}
			b3 := items[1].(map[string]any)
			if fmtAny(b3["rank"]) != "3" || b3["leaving"] != true || fmtAny(b3["jobs"]) != "[]" || fmtAny(b3["gpuDevices"]) != "[]" {
				t.Errorf("%s: b %v", f, b3)
			}
			for i, want := range []string{"cordoned", "draining", "drained"} {
				if got := fmtAny(items[3+i].(map[string]any)["schedule"]); got != want {
					t.Errorf("%s: item %d's schedule %s, want %s", f, 3+i, got, want)
				}
			}
			if items[2].(map[string]any)["registered"] != false {
				t.Errorf("%s: c %v", f, items[2])
			}
		})
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case nil:
		return "<nil>"
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, fmtAny(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

func TestNodesTable(t *testing.T) {
	for _, tt := range []struct {
		f    Format
		want string
	}{
		{Table, `NODE  ADDR      RANK  STATE                 GPUS  FREE  JOBS  HEALTH
a     10.0.0.1  -     alive                 2     1     j-1   -
b     10.0.0.2  3     alive,leaving         0     0     -     -
c     10.0.0.3  -     alive,not-registered  0     0     -     -
d     10.0.0.4  -     alive,cordoned        0     0     -     -
e     10.0.0.5  -     alive,draining        0     0     j-2   -
f               -     -,drained             0     0     -     -
`},
		{Wide, `NODE  ADDR      RANK  STATE                 GPUS  FREE  JOBS  HEALTH  BUSY  CPUS  VERSION  FABRIC  GPU-NAMES
a     10.0.0.1  -     alive                 2     1     j-1   -       1     8     v1       -       H100,H100
b     10.0.0.2  3     alive,leaving         0     0     -     -       -     -     -        -       -
c     10.0.0.3  -     alive,not-registered  0     0     -     -       -     -     -        -       -
d     10.0.0.4  -     alive,cordoned        0     0     -     -       -     -     -        -       -
e     10.0.0.5  -     alive,draining        0     0     j-2   -       -     -     -        -       -
f               -     -,drained             0     0     -     -       -     -     -        -       -
`},
	} {
		var b bytes.Buffer
		if err := WriteNodes(&b, tt.f, Nodes(testNodes())); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tt.f, b.String(), tt.want)
		}
	}
}

// A node's HEALTH says how its last check went, how long ago, and why it
// failed.
func TestNodeHealthCell(t *testing.T) {
	checked := time.UnixMilli(1_700_000_000_000)
	for _, tt := range []struct {
		h    *musterv1.NodeHealth
		want string
	}{
		{nil, "-"},
		{&musterv1.NodeHealth{Ok: true, Check: "gpus, agent command", CheckedUnixMs: checked.UnixMilli()}, "ok (12s ago): gpus, agent command"},
		{&musterv1.NodeHealth{Check: "agent command", Reason: "exit 1: disk full", JobId: "j-1", CheckedUnixMs: checked.UnixMilli()},
			"failed (12s ago, job j-1): agent command: exit 1: disk full"},
	} {
		n := Nodes([]*musterv1.NodeStatus{{Node: &musterv1.Node{Name: "a"}, Health: tt.h}}).Items[0]
		if got := n.Health.cell(checked.Add(12 * time.Second)); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.h, got, tt.want)
		}
	}
}

func testJobs() []*musterv1.JobStatus {
	return []*musterv1.JobStatus{
		{JobId: "j-1", State: musterv1.JobState_JOB_STATE_RUNNING, Nodes: []string{"a", "b"}, Rounds: 2, Restarts: 1,
			Spec:            &musterv1.JobSpec{Argv: [][]byte{[]byte("python"), []byte("train.py")}, Nnodes: 2, Nproc: 4, Gpus: 4, MaxRestarts: 3, Name: "train"},
			SubmittedUnixMs: 1_700_000_000_123, StartedUnixMs: 1_700_000_001_000},
		{JobId: "j-2", State: musterv1.JobState_JOB_STATE_FAILED, ExitCode: 3, Owner: &musterv1.Identity{Uid: 1000, User: "ann"}, Rounds: 1, Summary: "rank 0 (node a, local rank 0) exited with code 3",
			Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("false")}, Nnodes: 1}, SubmittedUnixMs: 1_700_000_000_000,
			StartedUnixMs: 1_700_000_000_500, EndedUnixMs: 1_700_000_002_000},
	}
}

func TestJobsSerialized(t *testing.T) {
	for _, f := range []Format{JSON, YAML} {
		t.Run(string(f), func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteJobs(&b, f, Jobs(testJobs())); err != nil {
				t.Fatal(err)
			}
			v := decode(t, f, b.Bytes())
			items, _ := v["items"].([]any)
			if v["apiVersion"] != "muster/v1" || v["kind"] != "JobList" || len(items) != 2 {
				t.Fatalf("%v", v)
			}
			for i, want := range []map[string]string{
				{"kind": "Job", "id": "j-1", "name": "train", "state": "running", "exitCode": "<nil>", "user": "", "uid": "<nil>",
					"command": "[python train.py]", "nodes": "[a b]", "nnodes": "2", "nprocPerNode": "4", "gpusPerNode": "4",
					"rounds": "2", "restarts": "1", "maxRestarts": "3", "submitTime": "2023-11-14T22:13:20.123Z",
					"startTime": "2023-11-14T22:13:21.000Z", "endTime": "<nil>"},
				{"id": "j-2", "state": "failed", "exitCode": "3", "user": "ann", "uid": "1000", "nodes": "[]",
					"summary": "rank 0 (node a, local rank 0) exited with code 3",
					"endTime": "2023-11-14T22:13:22.000Z"},
			} {
				item := items[i].(map[string]any)
				for k, w := range want {
					if got := fmtAny(item[k]); got != w {
						t.Errorf("%s: item %d's %s = %s, want %s", f, i, k, got, w)
					}
				}
			}
		})
	}
}

func TestJobsTable(t *testing.T) {
	for _, tt := range []struct {
		f    Format
		want string
	}{
		{Table, `JOB  STATE    EXIT  USER        NODES  STARTED                   ENDED                     ROUNDS  COMMAND          SUMMARY
j-1  running  -     (operator)  a,b    2023-11-14T22:13:21.000Z  -                         2       python train.py  -
j-2  failed   3     ann         -      2023-11-14T22:13:20.500Z  2023-11-14T22:13:22.000Z  1       false            rank 0 (node a, local rank 0) exited with code 3
`},
		{Wide, `JOB  NAME   STATE    EXIT  USER        NODES  ROUNDS  RESTARTS  SUBMITTED                 STARTED                   ENDED                     COMMAND          SUMMARY
j-1  train  running  -     (operator)  a,b    2       1/3       2023-11-14T22:13:20.123Z  2023-11-14T22:13:21.000Z  -                         python train.py  -
j-2  -      failed   3     ann         -      1       0         2023-11-14T22:13:20.000Z  2023-11-14T22:13:20.500Z  2023-11-14T22:13:22.000Z  false            rank 0 (node a, local rank 0) exited with code 3
`},
	} {
		var b bytes.Buffer
		if err := WriteJobs(&b, tt.f, Jobs(testJobs())); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tt.f, b.String(), tt.want)
		}
	}
	var b bytes.Buffer
	if err := WriteJobs(&b, Table, Jobs(nil)); err != nil || b.String() != "JOB  STATE  EXIT  USER  NODES  STARTED  ENDED  ROUNDS  COMMAND  SUMMARY\n" {
		t.Errorf("no jobs: %q, %v", b.String(), err)
	}
}

// A job of many nodes keeps the jobs table narrow: its NODES cell is a
// hostlist, or as many names as fit and how many more, never every name.
func TestJobsTableNodesCell(t *testing.T) {
	names := func(format string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(format, i+1))
		}
		return out
	}
	// apart are names no hostlist joins: aa-gpu, ba-gpu, ...
	apart := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, string(rune('a'+i%26))+string(rune('a'+i/26))+"-gpu")
		}
		return out
	}
	tests := []struct {
		name  string
		nodes []string
		want  string
	}{
		{"none", nil, "-"},
		{"two", []string{"a", "b"}, "a,b"},
		{"forty numbered", names("node%02d", 40), "node[01-40]"},
		{"numbered and not", append(names("gpu%d", 3), "cpu-7", "gpu9"), "gpu[1-3],cpu-7,gpu9"},
		{"forty numbered, long", names("host-%d.cluster.example", 40), "host-[1-40].cluster.example"},
		{"forty named apart", apart(40), "aa-gpu,ba-gpu,ca-gpu + 37 more"},
		{"short names apart", []string{"ab", "x1y", "cd", "x2y", "ef", "gh", "ij", "kl", "mn", "op", "qr"}, "ab,x1y,cd,x2y,ef,gh,ij + 4 more"},
		{"one long name", []string{"a-very-long-host-name.rack-42.cluster.example"}, "a-very-long-host-name.rack-42.cluster.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			st := &musterv1.JobStatus{JobId: "j-1", State: musterv1.JobState_JOB_STATE_RUNNING, Nodes: tt.nodes, Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}}}
			short := &musterv1.JobStatus{JobId: "j-2", State: musterv1.JobState_JOB_STATE_RUNNING, Nodes: []string{"a"}, Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}}}
			if err := WriteJobs(&b, Table, Jobs([]*musterv1.JobStatus{st, short})); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(b.String(), "\n")
			nodes := strings.Index(lines[0], "NODES")
			got := strings.Fields(lines[1][nodes:strings.Index(lines[0], "STARTED")])
			if strings.Join(got, " ") != tt.want {
				t.Errorf("NODES %q, want %q:\n%s", strings.Join(got, " "), tt.want, b.String())
			}
			if col := strings.Index(lines[0], "STARTED") - nodes - 2; col > max(32, len(tt.want)) {
				t.Errorf("NODES is %d wide, every row padded to it:\n%s", col, b.String())
			}
		})
	}
}

// A watch in JSON is one object a line, each a whole Job.
func TestJobWatchJSONLines(t *testing.T) {
	var b bytes.Buffer
	w := NewJobWatch(&b, JSON)
	const n = 64
	for i := range n {
		st := testJobs()[i%2]
		if err := w.Write(JobOf(st)); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		var j Job
		if err := json.Unmarshal([]byte(l), &j); err != nil || j.Kind != "Job" || j.ID != testJobs()[i%2].JobId {
			t.Fatalf("line %d %q: %v, %v", i, l, j, err)
		}
	}
	b.Reset()
	w = NewJobWatch(&b, YAML)
	for _, st := range testJobs() {
		w.Write(JobOf(st))
	}
	dec := yaml.NewDecoder(&b)
	docs := 0
	for {
		var j Job
		if err := dec.Decode(&j); err != nil {
			break
		}
		docs++
		if j.Kind != "Job" {
			t.Fatalf("document %d: %v", docs, j)
		}
	}
	if docs != 2 {
		t.Fatalf("%d YAML documents, want 2", docs)
	}
}

func TestDoctorSerialized(t *testing.T) {
	master := "10.0.0.1"
	d := NewDoctor()
	d.Master, d.NCCLVersion, d.NCCLVersionFrom = &master, "2.20.5", "flag"
	d.Detected = append(d.Detected, Variable{"NCCL_SOCKET_IFNAME", "eth0"}, Variable{"NCCL_IB_HCA", ""})
	d.Reasons = append(d.Reasons, "eth0 routes to the master")
	for _, f := range []Format{JSON, YAML} {
		var b bytes.Buffer
		if err := WriteDoctor(&b, f, d); err != nil {
			t.Fatal(err)
		}
		v := decode(t, f, b.Bytes())
		if v["kind"] != "Doctor" || v["master"] != "10.0.0.1" || v["ncclVersion"] != "2.20.5" || fmtAny(v["userVariables"]) != "[]" ||
			len(v["detected"].([]any)) != 2 || fmtAny(v["platform"]) != "[]" {
			t.Errorf("%s: %v", f, v)
		}
	}
	var b bytes.Buffer
	WriteDoctor(&b, Table, d)
	for _, want := range []string{"master:        10.0.0.1\n", "NCCL version:  2.20.5 (from --nccl-version)\n",
		"  NCCL_SOCKET_IFNAME   eth0\n", "  NCCL_IB_HCA          not set\n", "  - eth0 routes to the master\n", "  none\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestHostsSerialized(t *testing.T) {
	hosts := []hostfile.Host{{Name: "n1", Slots: 8}, {Name: "n2", Slots: 4, MaxSlots: 6, User: "ann"}, {Name: "n3"}}
	for _, f := range []Format{JSON, YAML} {
		var b bytes.Buffer
		if err := WriteHosts(&b, f, Hosts(hosts)); err != nil {
			t.Fatal(err)
		}
		v := decode(t, f, b.Bytes())
		items := v["items"].([]any)
		if v["kind"] != "HostList" || len(items) != 3 {
			t.Fatalf("%s: %v", f, v)
		}
		n2, n3 := items[1].(map[string]any), items[2].(map[string]any)
		if fmtAny(n2["slots"]) != "4" || fmtAny(n2["maxSlots"]) != "6" || n2["user"] != "ann" || n3["slots"] != nil {
			t.Errorf("%s: %v", f, items)
		}
	}
	var b bytes.Buffer
	WriteHosts(&b, Table, Hosts(hosts))
	if want := "HOST  SLOTS\nn1    8\nn2    4\nn3    -\n"; b.String() != want {
		t.Errorf("table %q, want %q", b.String(), want)
	}
}

// What `launcher nodes cordon|drain|uncordon` prints for a node.
func TestDescribeSchedule(t *testing.T) {
	tests := []struct {
		verb string
		resp *musterv1.SetNodeScheduleResponse
		want string
	}{
		{"cordon", &musterv1.SetNodeScheduleResponse{Jobs: []string{"j-1"}}, "node b cordoned"},
		{"drain", &musterv1.SetNodeScheduleResponse{}, "node b drained"},
		{"drain", &musterv1.SetNodeScheduleResponse{Jobs: []string{"j-1", "j-2"}},
			"node b draining: 2 job(s) run there still (j-1, j-2); their next rounds form elsewhere"},
		{"uncordon", &musterv1.SetNodeScheduleResponse{Previous: musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED}, "node b uncordoned"},
		{"uncordon", &musterv1.SetNodeScheduleResponse{}, "node b was neither cordoned nor drained"},
	}
	for _, tt := range tests {
		if got := DescribeSchedule("b", tt.verb, tt.resp); got != tt.want {
			t.Errorf("%s %v: %q, want %q", tt.verb, tt.resp, got, tt.want)
		}
	}
}

// Rows of a watch come one at a time, and still line up under its header.
func TestJobWatchRowsLineUp(t *testing.T) {
	var b strings.Builder
	jw := NewJobWatch(&b, Table)
	start := "2026-11-28T03:04:05Z"
	for _, j := range []Job{
		{ID: "j-1", State: "pending", User: "ada", Command: []string{"true"}},
		{ID: "j-0123456789ab", State: "running", User: "a-long-user", Nodes: []string{"node01", "node02"}, Rounds: 1, StartTime: &start, Command: []string{"python", "train.py"}},
	} {
		if err := jw.Write(j); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	for _, col := range []string{"STATE", "EXIT", "USER", "NODES", "STARTED", "ENDED", "ROUNDS", "COMMAND"} {
		at := strings.Index(lines[0], col)
		for _, row := range lines[1:] {
			if at >= len(row) || row[at-1] != ' ' || row[at] == ' ' {
				t.Errorf("column %s (at %d) does not start a cell in %q", col, at, row)
			}
		}
	}
}
