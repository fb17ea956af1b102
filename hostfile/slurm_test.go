package hostfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestFromSlurm(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []Host
		err  string
	}{
		{
			env:  map[string]string{"SLURM_JOB_NODELIST": "gpu[01-03],login", "SLURM_TASKS_PER_NODE": "8(x3),1"},
			want: []Host{{Name: "gpu01", Slots: 8}, {Name: "gpu02", Slots: 8}, {Name: "gpu03", Slots: 8}, {Name: "login", Slots: 1}},
		},
		{
			env:  map[string]string{"SLURM_NODELIST": "n[1-2]"},
			want: []Host{{Name: "n1"}, {Name: "n2"}},
		},
		{
			env:  map[string]string{"SLURM_JOB_NODELIST": "a", "SLURM_NODELIST": "b"},
			want: []Host{{Name: "a"}},
		},
		{env: map[string]string{}, err: ErrNoHosts.Error()},
		{env: map[string]string{"SLURM_JOB_NODELIST": "n[1-2", "SLURM_TASKS_PER_NODE": "1"}, err: "SLURM_JOB_NODELIST: hostlist"},
		{env: map[string]string{"SLURM_JOB_NODELIST": " , "}, err: "SLURM_JOB_NODELIST: no hosts"},
		{env: map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1"},
			err: "SLURM_TASKS_PER_NODE gives 1 counts for the 2 hosts of SLURM_JOB_NODELIST"},
		{env: map[string]string{"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "x"}, err: "SLURM_TASKS_PER_NODE: task counts"},
		{env: map[string]string{"SLURM_NODELIST": "n1,n1"}, err: "SLURM_NODELIST: host n1 is listed twice"},
	}
	for _, tt := range tests {
		got, err := FromSlurm(func(k string) string { return tt.env[k] })
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("FromSlurm(%v) error = %v, want %q", tt.env, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("FromSlurm(%v) = %+v, %v; want %+v", tt.env, got, err, tt.want)
		}
	}
	if _, err := FromSlurm(func(string) string { return "" }); !errors.Is(err, ErrNoHosts) {
		t.Errorf("outside Slurm: error = %v, want ErrNoHosts", err)
	}
}
