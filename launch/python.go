package launch

import (
	"errors"
	"strings"
)

// DefaultPython is the Python a worker runs a module or a .py program with
// when PYTHON_EXEC does not name one: the python3 on the worker's PATH.
const DefaultPython = "python3"

// Python says how a job's command runs under Python, as torchrun's -m and
// --no-python do.
type Python struct {
	Module   bool   // the command's first word is a module: python -m MODULE
	NoPython bool   // the command runs as given, .py or not
	Exec     string // the Python to run (PYTHON_EXEC, as torchrun reads it); "" for DefaultPython
}

// Argv is the command a worker runs for argv: with Module, or when argv's
// program is a .py file, torchrun's `python -u [-m] PROGRAM ARGS` (-u
// because a worker's output is a pipe, which Python would otherwise
// buffer); any other program runs as given.
func (p Python) Argv(argv []string) ([]string, error) {
	if p.Module && p.NoPython {
		return nil, errors.New("-m runs a module under Python and --no-python runs the command as given: give one of them")
	}
	if len(argv) == 0 || p.NoPython || !p.Module && !strings.HasSuffix(argv[0], ".py") {
		return argv, nil
	}
	python := p.Exec
	if python == "" {
		python = DefaultPython
	}
	out := []string{python, "-u"}
	if p.Module {
		out = append(out, "-m")
	}
	return append(out, argv...), nil
}
