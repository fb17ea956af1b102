package hostfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hosts")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(file, []byte("a slots=2\nb slots=4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("# none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	slurm := func(k string) string {
		return map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "4(x2)"}[k]
	}
	tests := []struct {
		name string
		src  Sources
		want []Host
		err  string
	}{
		{"file", Sources{File: file, Getenv: slurm}, []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 4}}, ""},
		{"hosts", Sources{Hosts: "x:2,y", Getenv: slurm}, []Host{{Name: "x", Slots: 2}, {Name: "y", Slots: 1}}, ""},
		{"slurm", Sources{Getenv: slurm}, []Host{{Name: "n1", Slots: 4}, {Name: "n2", Slots: 4}}, ""},
		{"both", Sources{File: file, Hosts: "x"}, nil, "not both"},
		{"bad hosts", Sources{Hosts: "x:0"}, nil, `-H: host x: slots must be a positive integer, got "0"`},
		{"empty file", Sources{File: empty}, nil, empty + ": no hosts in file"},
		{"missing file", Sources{File: filepath.Join(dir, "nope")}, nil, "no such file"},
		{"nothing", Sources{}, nil, ErrNoHosts.Error()},
	}
	for _, tt := range tests {
		got, err := Resolve(tt.src)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error = %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	if _, err := Resolve(Sources{Getenv: func(string) string { return "" }}); !errors.Is(err, ErrNoHosts) {
		t.Errorf("empty environment: error = %v, want ErrNoHosts", err)
	}
}
