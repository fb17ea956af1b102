package launch

import (
	"slices"
	"testing"
)

func TestPythonArgv(t *testing.T) {
	tests := []struct {
		name string
		p    Python
		argv []string
		want []string
		err  bool
	}{
		{"a .py program", Python{}, []string{"train.py", "--lr", "1"}, []string{"python3", "-u", "train.py", "--lr", "1"}, false},
		{"a .py program in a folder", Python{}, []string{"scripts/train.py"}, []string{"python3", "-u", "scripts/train.py"}, false},
		{"a module", Python{Module: true}, []string{"pkg.train", "-m", "x"}, []string{"python3", "-u", "-m", "pkg.train", "-m", "x"}, false},
		{"PYTHON_EXEC", Python{Exec: "/opt/venv/bin/python"}, []string{"train.py"}, []string{"/opt/venv/bin/python", "-u", "train.py"}, false},
		{"another program", Python{}, []string{"./cpu_job", "a.py"}, []string{"./cpu_job", "a.py"}, false},
		{"python itself", Python{}, []string{"python", "-m", "pkg"}, []string{"python", "-m", "pkg"}, false},
		{"--no-python", Python{NoPython: true}, []string{"train.py", "x"}, []string{"train.py", "x"}, false},
		{"-m and --no-python", Python{Module: true, NoPython: true}, []string{"pkg"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.Argv(tt.argv)
			if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
				t.Fatalf("%q: %q, %v; want %q (error: %v)", tt.argv, got, err, tt.want, tt.err)
			}
		})
	}
}
