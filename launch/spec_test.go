package launch

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestResolveEnv(t *testing.T) {
	launcherEnv := map[string]string{"PASSED": "from launcher, with comma", "RAW": "caf\xe9 "}
	lookup := func(k string) (string, bool) { v, ok := launcherEnv[k]; return v, ok }
	tests := []struct {
		flags   []string
		want    []string
		wantErr string
	}{
		{[]string{"CUDA_VISIBLE_DEVICES=0,1"}, []string{"CUDA_VISIBLE_DEVICES=0,1"}, ""},
		{[]string{"NCCL_SOCKET_IFNAME=^docker0,lo", "A= spaced  "}, []string{"NCCL_SOCKET_IFNAME=^docker0,lo", "A= spaced  "}, ""},
		{[]string{"B=caf\xe9"}, []string{"B=caf\xe9"}, ""},
		{[]string{"PASSED", "RAW"}, []string{"PASSED=from launcher, with comma", "RAW=caf\xe9 "}, ""},
		{[]string{"EMPTY="}, []string{"EMPTY="}, ""},
		{[]string{"UNSET"}, nil, "-x UNSET: UNSET is not set in the launcher's environment (use -x UNSET=value to set it)"},
	}
	for _, tt := range tests {
		got, err := ResolveEnv(tt.flags, lookup)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%q: %v, want %q", tt.flags, err, tt.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Fatalf("%q: %q, %v; want %q", tt.flags, got, err, tt.want)
		}
		for i := range got {
			if string(got[i]) != tt.want[i] {
				t.Errorf("%q: variable %d is %q, want %q", tt.flags, i, got[i], tt.want[i])
			}
		}
	}
}

func TestStdinFlag(t *testing.T) {
	tests := []struct {
		in      string
		rank    int32 // -1: none
		all     bool
		wantErr bool
	}{
		{"0", 0, false, false},
		{"3", 3, false, false},
		{"all", -1, true, false},
		{"none", -1, false, false},
		{"-1", 0, false, true},
		{"ALL", 0, false, true},
		{"one", 0, false, true},
		{"99999999999", 0, false, true},
	}
	for _, tt := range tests {
		var s Stdin
		err := s.Set(tt.in)
		if tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), "want a rank") {
				t.Errorf("Set(%q) = %v, want an error", tt.in, err)
			}
			continue
		}
		spec := &musterv1.JobSpec{}
		s.Apply(spec)
		rank := int32(-1)
		if spec.StdinRank != nil {
			rank = *spec.StdinRank
		}
		if err != nil || rank != tt.rank || spec.StdinAll != tt.all || s.String() != tt.in {
			t.Errorf("Set(%q): rank %d, all %v, %q, %v; want %d, %v", tt.in, rank, spec.StdinAll, s.String(), err, tt.rank, tt.all)
		}
	}
	// The default, as mpirun: rank 0.
	var s Stdin
	spec := &musterv1.JobSpec{}
	s.Apply(spec)
	if spec.StdinRank == nil || *spec.StdinRank != 0 || spec.StdinAll {
		t.Errorf("default: rank %v, all %v; want rank 0", spec.StdinRank, spec.StdinAll)
	}
}

func TestJobSpec(t *testing.T) {
	tests := []struct {
		name string
		job  Job
		want *musterv1.JobSpec
	}{
		{name: "defaults", job: Job{Argv: []string{"python3", "train.py"}, Nnodes: 2},
			want: &musterv1.JobSpec{Argv: [][]byte{[]byte("python3"), []byte("train.py")}, Nnodes: 2, NcclAutodetect: true, InheritEnv: true}},
		{name: "a health check with its timeout", job: Job{Policy: Policy{HealthCheck: "nvidia-smi", HealthCheckTimeout: time.Minute,
			RestartOn: musterv1.RestartOn_RESTART_ON_NODE_LOSS, RestartBackoff: time.Second}},
			want: &musterv1.JobSpec{HealthCheck: []byte("nvidia-smi"), HealthCheckTimeoutMs: 60000, RestartOn: musterv1.RestartOn_RESTART_ON_NODE_LOSS,
				RestartBackoffMs: 1000, NcclAutodetect: true, InheritEnv: true}},
		{name: "no health check, no timeout", job: Job{Policy: Policy{HealthCheckTimeout: time.Minute}, NoNCCLAutodetect: true},
			want: &musterv1.JobSpec{InheritEnv: true}},
		{name: "durations in milliseconds", job: Job{KillTimeout: 10 * time.Second, Timeout: time.Hour, WaitTimeout: time.Minute, LastCall: 30 * time.Second,
			HangTimeout: 5 * time.Second, HangFirstTimeout: time.Minute},
			want: &musterv1.JobSpec{KillTimeoutMs: 10000, TimeoutMs: 3600000, WaitTimeoutMs: 60000, LastCallMs: 30000,
				HangTimeoutMs: 5000, HangFirstTimeoutMs: 60000, NcclAutodetect: true, InheritEnv: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.job.Spec(); !proto.Equal(got, tt.want) {
				t.Fatalf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}
