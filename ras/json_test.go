package ras

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// rankJSON writes one rank as NCCL does, on fewer lines.
func rankJSON(rank int, status string, allReduce int64) string {
	return fmt.Sprintf(`{"rank": %d, "host": "10.0.0.1", "pid": %d, "cuda_dev": %d, "nvml_dev": %d, "status": %s,
	 "collective_counts": {"Broadcast": 0, "Reduce": 0, "AllGather": 0, "ReduceScatter": 0, "AllReduce": %d}}`,
		rank, 100+rank, rank, rank, status, allReduce)
}

const running = `{"init_state": 0, "async_error": 0, "finalize_called": false, "destroy_flag": false, "abort_flag": false}`

func reportJSON(comms ...string) []byte {
	return []byte(`{"nccl_version": "2.29.7", "communicators_count": ` + fmt.Sprint(len(comms)) +
		`, "communicators": [` + strings.Join(comms, ",") + `], "ras": {"collection_time_sec": 0.001, "timeouts_count": 0}}`)
}

func commJSON(hash string, size int, ranks []string, missing ...string) string {
	return fmt.Sprintf(`{"hash": %q, "secondary_hash": "0x1:0x2", "size": %d, "ranks_count": %d, "missing_ranks_count": %d, "ranks": [%s], "missing_ranks": [%s]}`,
		hash, size, len(ranks), len(missing), strings.Join(ranks, ","), strings.Join(missing, ","))
}

func TestParseJSONComms(t *testing.T) {
	tests := []struct {
		name  string
		comm  string
		check func(t *testing.T, c Comm)
	}{
		{
			name: "states and errors",
			comm: commJSON("0xab", 4, []string{
				rankJSON(0, running, 3),
				rankJSON(1, `{"init_state": 5, "async_error": 0, "finalize_called": false, "destroy_flag": false, "abort_flag": false}`, 0),
				rankJSON(2, `{"init_state": 0, "async_error": 7, "finalize_called": false, "destroy_flag": true, "abort_flag": false}`, 3),
				rankJSON(3, running, 3),
			}),
			check: func(t *testing.T, c Comm) {
				if c.State != "FINALIZE" || c.Status != "ERROR,MISMATCH" {
					t.Errorf("state %q, status %q", c.State, c.Status)
				}
				var got []string
				for _, m := range c.StatusOutliers {
					got = append(got, fmt.Sprintf("%d:%s", m.CommRank, m.Status))
				}
				if want := []string{"1:INIT", "2:FINALIZE"}; !reflect.DeepEqual(got, want) {
					t.Errorf("outliers %q", got)
				}
				if len(c.Errors) != 1 || c.Errors[0].Error != "Invalid usage" {
					t.Errorf("errors %+v (ncclInProgress is no error)", c.Errors)
				}
				if c.Op != "AllReduce" || len(c.Behind) != 1 || c.Behind[0].CommRank != 1 {
					t.Errorf("op %q, behind %+v", c.Op, c.Behind)
				}
			},
		},
		{
			name: "unknown peer",
			comm: commJSON("0xab", 2, []string{rankJSON(0, running, 5)},
				`{"rank": 1, "host": "unknown", "pid": -1, "cuda_dev": 1, "nvml_dev": 1, "status": {"unresponsive": true, "considered_dead": false}}`),
			check: func(t *testing.T, c Comm) {
				want := []Member{{CommRank: 1, GPU: 1, NVMLGPU: 1}}
				if !reflect.DeepEqual(c.Missing, want) || c.Status != "INCOMPLETE" {
					t.Errorf("missing %+v, status %q", c.Missing, c.Status)
				}
			},
		},
		{
			name: "all NOCOMM",
			comm: commJSON("0xab", 1, nil,
				`{"rank": 0, "host": "10.0.0.1", "pid": 9, "cuda_dev": 0, "nvml_dev": 0, "status": {"unresponsive": false, "considered_dead": false}}`),
			check: func(t *testing.T, c Comm) {
				if c.State != "NOCOMM" || c.Status != "OK" || len(c.StatusOutliers) != 0 {
					t.Errorf("comm %+v", c)
				}
			},
		},
		{
			name: "an operation NCCL adds later",
			comm: commJSON("0xab", 2, []string{
				`{"rank": 0, "host": "h", "pid": 1, "cuda_dev": 0, "nvml_dev": 0, "status": ` + running + `, "collective_counts": {"AllReduce": 2, "AlltoAll": 7}}`,
				`{"rank": 1, "host": "h", "pid": 2, "cuda_dev": 1, "nvml_dev": 1, "status": ` + running + `, "collective_counts": {"AllReduce": 2}}`,
			}),
			check: func(t *testing.T, c Comm) {
				if c.Op != "AlltoAll" || c.Launched != 7 || len(c.Behind) != 1 || c.Behind[0].CommRank != 1 {
					t.Errorf("comm %+v", c)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseJSON(reportJSON(tt.comm))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r.Comms[0])
		})
	}
}

func TestParseJSONRejects(t *testing.T) {
	ok := rankJSON(0, running, 1)
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "unexpected end of JSON input"},
		{"text report", []byte("NCCL version 2.28.9 compiled with CUDA 12.9\n"), "invalid character"},
		{"no version", []byte(`{"communicators": []}`), "no nccl_version"},
		{"bad hash", reportJSON(commJSON("5974ff37", 1, []string{ok})), `hash "5974ff37"`},
		{"long hash", reportJSON(commJSON("0x15974ff3706582d81", 1, []string{ok})), "hash"},
		{"negative rank", reportJSON(commJSON("0x1", 1, []string{strings.Replace(ok, `"rank": 0`, `"rank": -1`, 1)})), "rank -1"},
		{"huge GPU", reportJSON(commJSON("0x1", 1, []string{strings.Replace(ok, `"cuda_dev": 0`, `"cuda_dev": 70000`, 1)})), "GPU 70000"},
		{"fraction", reportJSON(commJSON("0x1", 1, []string{strings.Replace(ok, `"AllReduce": 1`, `"AllReduce": 1.5`, 1)})), "AllReduce"},
		{"negative count", reportJSON(commJSON("0x1", 1, []string{strings.Replace(ok, `"AllReduce": 1`, `"AllReduce": -1`, 1)})), "AllReduce"},
		{"counts not an object", reportJSON(commJSON("0x1", 1, []string{`{"rank": 0, "cuda_dev": 0, "nvml_dev": 0, "collective_counts": [1]}`})), "not an object"},
		{"host with spaces", reportJSON(commJSON("0x1", 1, []string{strings.Replace(ok, `"10.0.0.1"`, `"a b"`, 1)})), "host"},
		{"too large", make([]byte, MaxReportSize+1), "over the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJSON(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// Only the comma NCCL 2.28.7-2.28.9 leave out is put back: other broken
// JSON stays an error.
func TestParseJSONMissingComma(t *testing.T) {
	missing := `{"rank": 1, "host": "h", "pid": 2, "cuda_dev": 1, "nvml_dev": 1
          "status": {"unresponsive": true, "considered_dead": false}}`
	r, err := ParseJSON(reportJSON(commJSON("0x1", 2, []string{rankJSON(0, running, 1)}, missing)))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Comms[0].Missing) != 1 {
		t.Errorf("missing %+v", r.Comms[0].Missing)
	}
	other := strings.Replace(missing, `"pid": 2,`, `"pid": 2`, 1)
	if _, err := ParseJSON(reportJSON(commJSON("0x1", 2, nil, other))); err == nil {
		t.Error("another missing comma was accepted")
	}
}

func TestParseJSONBounds(t *testing.T) {
	comms := make([]string, maxComms+5)
	for i := range comms {
		comms[i] = fmt.Sprintf(`{"hash": "0x%x", "size": 0}`, i+1)
	}
	r, err := ParseJSON(reportJSON(comms...))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Comms) != maxComms || !r.Truncated {
		t.Errorf("%d comms, truncated %v", len(r.Comms), r.Truncated)
	}
}
