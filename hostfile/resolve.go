package hostfile

import (
	"fmt"
)

// ErrNoHosts says that no source named any host.
const ErrNoHosts = constError("no hosts: give a hostfile or -H, or run inside a Slurm allocation")

type constError string

func (e constError) Error() string { return string(e) }

// Sources are the places a host list can come from. Resolve uses the first
// one set: File, then Hosts, then the Slurm allocation read through Getenv.
type Sources struct {
	File   string              // a hostfile in any of the three formats
	Hosts  string              // an mpirun -H list: host[:slots],...
	Getenv func(string) string // reads SLURM_* variables; nil skips Slurm
}

// Resolve returns the hosts that s names. Giving both File and Hosts is an
// error, since Open MPI's way of mixing them (-H filters the file) surprises.
func Resolve(s Sources) ([]Host, error) {
	switch {
	case s.File != "" && s.Hosts != "":
		return nil, fmt.Errorf("give a hostfile or -H, not both")
	case s.File != "":
		hosts, err := ReadFile(s.File)
		if err != nil {
			return nil, err
		}
		if len(hosts) == 0 {
			return nil, &ParseError{Name: s.File, Msg: "no hosts in file"}
		}
		return hosts, nil
	case s.Hosts != "":
		hosts, err := ParseHostArg(s.Hosts)
		if err != nil {
			return nil, fmt.Errorf("-H: %w", err)
		}
		return hosts, nil
	case s.Getenv != nil:
		return FromSlurm(s.Getenv)
	}
	return nil, ErrNoHosts
}
