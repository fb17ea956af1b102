package ras

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// textReport wraps lines of the Errors and Warnings sections in the rest
// of a report.
func textReport(errorLines, warningLines string) []byte {
	return []byte("NCCL version 2.28.9 compiled with CUDA 12.9\n" +
		"CUDA runtime version 12090, driver version 13000\n\n" +
		"Communicators... (0.002s)\n=============\n\n" +
		"Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n" +
		"    #  in group  per comm  per node  per comm  in group\n" +
		"    0         1         2         4         8         8   RUNNING  INCOMPLETE,ERROR,MISMATCH\n" +
		"\nErrors\n======\n\n" + errorLines + "Warnings\n========\n\n" + warningLines)
}

// Lines NCCL prints that the fixtures do not hold.
func TestParseTextLines(t *testing.T) {
	const hdr = "#0-0 (00000000000000ab) "
	tests := []struct {
		name             string
		errors, warnings string
		check            func(t *testing.T, c Comm)
	}{
		{
			name:     "process information not found",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different AllReduce operation counts\n  7 ranks have launched up to operation 9\n  Rank 3 has not launched any operations -- [process information not found]\n\n",
			check: func(t *testing.T, c Comm) {
				want := []Member{{CommRank: 3, GPU: -1, NVMLGPU: -1}}
				if !reflect.DeepEqual(c.Behind, want) || c.Launched != 9 {
					t.Errorf("behind %+v, launched %d", c.Behind, c.Launched)
				}
			},
		},
		{
			name:     "not launched any, grouped",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different ReduceScatter operation counts\n  6 ranks have launched up to operation 4\n  2 ranks have not launched any operations\n  Rank 1 -- GPU 1 managed by process 11 on node 10.0.0.1\n  Rank 6 -- GPU 2 managed by process 16 on node 10.0.0.2\n\n",
			check: func(t *testing.T, c Comm) {
				if c.Op != "ReduceScatter" || len(c.Behind) != 2 || c.Behind[1].CommRank != 6 || c.Behind[1].Launched != 0 || c.Ops[0].BehindRanks != 2 {
					t.Errorf("comm %+v", c)
				}
			},
		},
		{
			name:     "a rank ahead is not behind",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different AllReduce operation counts\n  6 ranks have launched up to operation 4\n  Rank 0 has launched up to operation 5 -- GPU 0 managed by process 10 on node 10.0.0.1\n  Rank 5 has launched up to operation 3 -- GPU 1 managed by process 15 on node 10.0.0.2\n\n",
			check: func(t *testing.T, c Comm) {
				if c.Launched != 5 || c.Ops[0].BehindRanks != 7 || len(c.Behind) != 1 || c.Behind[0].CommRank != 5 {
					t.Errorf("comm %+v", c)
				}
			},
		},
		{
			name:   "NVML index and IPv6 node",
			errors: hdr + "INCOMPLETE\n  Missing communicator data from 1 rank\n  Rank 2 -- GPU 0 (NVML 6) managed by process 77 on node fd00::2\n\n",
			check: func(t *testing.T, c Comm) {
				want := []Member{{CommRank: 2, GPU: 0, NVMLGPU: 6, PID: 77, Node: "fd00::2"}}
				if !reflect.DeepEqual(c.Missing, want) {
					t.Errorf("missing %+v", c.Missing)
				}
			},
		},
		{
			name:   "empty node address",
			errors: hdr + "INCOMPLETE\n  Missing communicator data from 1 rank\n  Rank 2 -- GPU 1 managed by process 77 on node \n\n",
			check: func(t *testing.T, c Comm) {
				if len(c.Missing) != 1 || c.Missing[0].Node != "" || c.Missing[0].PID != 77 {
					t.Errorf("missing %+v", c.Missing)
				}
			},
		},
		{
			name:   "many missing, none named",
			errors: hdr + "INCOMPLETE\n  Missing communicator data from 12 ranks\n\n",
			check: func(t *testing.T, c Comm) {
				if c.MissingCount != 12 || len(c.Missing) != 0 {
					t.Errorf("missing %d %+v", c.MissingCount, c.Missing)
				}
			},
		},
		{
			name:   "pre-2.26 missing ranks",
			errors: hdr + "INCOMPLETE\n  Missing communicator data from 2 ranks\n  The missing ranks: 1,3\n\n",
			check: func(t *testing.T, c Comm) {
				want := []Member{{CommRank: 1, GPU: -1, NVMLGPU: -1}, {CommRank: 3, GPU: -1, NVMLGPU: -1}}
				if !reflect.DeepEqual(c.Missing, want) {
					t.Errorf("missing %+v", c.Missing)
				}
			},
		},
		{
			name:     "pre-2.26 unknown status",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different status\n  6 ranks have status RUNNING\n  The unknown ranks: 2,5\n",
			check: func(t *testing.T, c Comm) {
				if len(c.StatusOutliers) != 2 || c.StatusOutliers[1].CommRank != 5 || c.StatusOutliers[1].Status != "UNKNOWN" {
					t.Errorf("outliers %+v", c.StatusOutliers)
				}
			},
		},
		{
			name:     "pre-2.26 lone unknown rank",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different status\n  7 ranks have status RUNNING\n  Rank 4 has status UNKNOWN\n",
			check: func(t *testing.T, c Comm) {
				want := []Member{{CommRank: 4, GPU: -1, NVMLGPU: -1, Status: "UNKNOWN"}}
				if !reflect.DeepEqual(c.StatusOutliers, want) {
					t.Errorf("outliers %+v", c.StatusOutliers)
				}
			},
		},
		{
			name:   "errors by kind",
			errors: hdr + "ERROR\n  Initialization errors on 2 ranks\n  2 ranks reported Internal error\n  Rank 0 -- GPU 0 managed by process 10 on node 10.0.0.1\n  Rank 1 -- GPU 1 managed by process 11 on node 10.0.0.1\n  Asynchronous error on 1 rank\n  Rank 4 reported System error -- [process information not found]\n\n",
			check: func(t *testing.T, c Comm) {
				var got []string
				for _, m := range c.Errors {
					got = append(got, fmt.Sprintf("%d:%s", m.CommRank, m.Error))
				}
				if want := []string{"0:Internal error", "1:Internal error", "4:System error"}; !reflect.DeepEqual(got, want) {
					t.Errorf("errors %q", got)
				}
			},
		},
		{
			name:     "status then counts",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different status\n  7 ranks have status RUNNING\n  Rank 7 has status INIT -- GPU 3 managed by process 17 on node 10.0.0.2\n  Communicator ranks have different AllReduce operation counts\n  7 ranks have launched up to operation 2\n  Rank 7 has not launched any operations -- GPU 3 managed by process 17 on node 10.0.0.2\n\n",
			check: func(t *testing.T, c Comm) {
				if len(c.StatusOutliers) != 1 || c.StatusOutliers[0].Status != "INIT" || len(c.Behind) != 1 || c.Behind[0].CommRank != 7 {
					t.Errorf("comm %+v", c)
				}
			},
		},
		{
			name:     "unknown and malformed lines are skipped",
			warnings: hdr + "MISMATCH\n  Communicator ranks have different AllReduce operation counts\n  something new\n  7 ranks have launched up to operation 2\n  Rank x has launched up to operation 1 -- GPU 0 managed by process 1 on node a\n  Rank 1 has launched up to operation -1 -- GPU 0 managed by process 1 on node a\n  Rank 2 has launched up to operation 1 -- GPU 0 managed by proc 1 on node a\n  Rank 3 has launched up to operation 1 -- GPU 0 managed by process 1 on node a\n\n",
			check: func(t *testing.T, c Comm) {
				if len(c.Behind) != 1 || c.Behind[0].CommRank != 3 {
					t.Errorf("behind %+v", c.Behind)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseText(textReport(tt.errors, tt.warnings))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Comms) == 0 {
				t.Fatal("no communicator")
			}
			c := r.Comms[0]
			if c.Size != 8 || c.State != "RUNNING" {
				t.Errorf("size %d, state %q from the table", c.Size, c.State)
			}
			tt.check(t, c)
		})
	}
}

func TestParseTextJobLines(t *testing.T) {
	r, err := ParseText(textReport(
		"INCOMPLETE\n  Missing communicator data from 3 job processes\n  Process 10 on node 10.0.0.1 managing GPUs 0,1 (NVML 2,3)\n  Process 11 on node 10.0.0.1 managing GPU 2\n  [could not find information on 1 process]\n\n"+
			"DEAD\n  2 job processes are considered dead (unreachable via the RAS network)\n\n",
		"TIMEOUT\n  Encountered 3 communication timeouts while gathering communicator data\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Process{
		{PID: 10, Node: "10.0.0.1", GPUs: []int{0, 1}, NVMLGPUs: []int{2, 3}},
		{PID: 11, Node: "10.0.0.1", GPUs: []int{2}, NVMLGPUs: []int{2}},
	}
	if !reflect.DeepEqual(r.MissingProcesses, want) || r.MissingProcessCount != 3 {
		t.Errorf("missing %+v (%d)", r.MissingProcesses, r.MissingProcessCount)
	}
	if r.DeadProcessCount != 2 || len(r.DeadProcesses) != 0 || r.Timeouts != 3 {
		t.Errorf("dead %d, timeouts %d", r.DeadProcessCount, r.Timeouts)
	}
}

func TestParseTextRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "not an NCCL RAS text report"},
		{"other text", []byte("ERROR: Unknown command STATUSX\n"), "not an NCCL RAS text report"},
		{"JSON", []byte(`{"nccl_version": "2.28.9"}`), "not an NCCL RAS text report"},
		{"too large", make([]byte, MaxReportSize+1), "over the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseText(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// A report cut short parses, but is not Complete.
func TestParseTextPartial(t *testing.T) {
	full := textReport("", "")
	r, err := ParseText(full[:len(full)-len("Warnings\n========\n\n")])
	if err != nil {
		t.Fatal(err)
	}
	if r.Complete {
		t.Error("a report without its Warnings section is Complete")
	}
}

func TestParseTextBounds(t *testing.T) {
	var b strings.Builder
	for i := range maxComms + 10 {
		fmt.Fprintf(&b, "#0-%d (%016x) INCOMPLETE\n  Rank 1 -- GPU 1 managed by process 1 on node a\n", i, i)
	}
	r, err := ParseText(textReport(b.String(), ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Comms) != maxComms || !r.Truncated {
		t.Errorf("%d comms, truncated %v", len(r.Comms), r.Truncated)
	}

	// Lists of 1024 ranks keep this many members under MaxReportSize.
	b.Reset()
	b.WriteString("#0-0 (00000000000000ab) INCOMPLETE\n")
	for i := 0; i < maxMembers+10; i += 1024 {
		ranks := make([]string, 1024)
		for j := range ranks {
			ranks[j] = fmt.Sprint(i + j)
		}
		fmt.Fprintf(&b, "  The missing ranks: %s\n", strings.Join(ranks, ","))
	}
	r, err = ParseText(textReport(b.String(), ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Comms[0].Missing) != maxMembers || !r.Truncated {
		t.Errorf("%d members, truncated %v", len(r.Comms[0].Missing), r.Truncated)
	}
}
