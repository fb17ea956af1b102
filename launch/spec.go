package launch

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Job is what a command line says of the job it runs, the launcher's run
// and agent run alike; Spec makes its JobSpec. Zero values are not given.
type Job struct {
	Name string
	Argv []string
	// Nnodes is the most nodes, MinNodes the least of an elastic job.
	Nnodes, MinNodes int32
	GPUs, NProc      int32
	Env              [][]byte
	LogDir, Workdir  []byte
	KillTimeout      time.Duration
	Timeout          time.Duration
	WaitTimeout      time.Duration
	// LastCall is how long an elastic job's round waits for more nodes.
	LastCall         time.Duration
	MaxRestarts      int32
	IsolateGPUs      bool
	NoNCCLAutodetect bool
	MPI              string
	// CPUBind is the job's binding mode (--cpu-bind), "" for none.
	CPUBind          string
	NoAgentStore     bool
	MemoryLimit      int64
	HangTimeout      time.Duration
	HangFirstTimeout time.Duration
	HangOnSilence    bool
	Policy           Policy
}

// Policy is a job's restart policy and health check, as --restart-on,
// --no-restart-exit-codes, --restart-backoff, --restart-backoff-max,
// --health-check and --health-check-timeout give them.
type Policy struct {
	RestartOn          musterv1.RestartOn
	NoRestartExitCodes []int32
	RestartBackoff     time.Duration
	RestartBackoffMax  time.Duration
	HealthCheck        string
	HealthCheckTimeout time.Duration
}

// Spec is the job's spec, as submitted: workers inherit the environment
// they start in.
func (j Job) Spec() *musterv1.JobSpec {
	spec := &musterv1.JobSpec{
		Name:                j.Name,
		Nnodes:              j.Nnodes,
		MinNodes:            j.MinNodes,
		Gpus:                j.GPUs,
		Nproc:               j.NProc,
		Env:                 j.Env,
		LogDir:              j.LogDir,
		KillTimeoutMs:       j.KillTimeout.Milliseconds(),
		TimeoutMs:           j.Timeout.Milliseconds(),
		WaitTimeoutMs:       j.WaitTimeout.Milliseconds(),
		LastCallMs:          j.LastCall.Milliseconds(),
		MaxRestarts:         j.MaxRestarts,
		IsolateGpus:         j.IsolateGPUs,
		NcclAutodetect:      !j.NoNCCLAutodetect,
		InheritEnv:          true,
		Workdir:             j.Workdir,
		Mpi:                 j.MPI,
		CpuBind:             j.CPUBind,
		NoAgentStore:        j.NoAgentStore,
		MemoryLimitBytes:    j.MemoryLimit,
		HangTimeoutMs:       j.HangTimeout.Milliseconds(),
		HangFirstTimeoutMs:  j.HangFirstTimeout.Milliseconds(),
		HangOnSilence:       j.HangOnSilence,
		RestartOn:           j.Policy.RestartOn,
		NoRestartExitCodes:  j.Policy.NoRestartExitCodes,
		RestartBackoffMs:    j.Policy.RestartBackoff.Milliseconds(),
		RestartBackoffMaxMs: j.Policy.RestartBackoffMax.Milliseconds(),
	}
	if j.Policy.HealthCheck != "" {
		spec.HealthCheck, spec.HealthCheckTimeoutMs = []byte(j.Policy.HealthCheck), j.Policy.HealthCheckTimeout.Milliseconds()
	}
	for _, a := range j.Argv {
		spec.Argv = append(spec.Argv, []byte(a))
	}
	return spec
}

// ResolveEnv turns -x flags into a job's variables: NAME=value sets NAME to
// value exactly as given (commas, spaces and any bytes kept), NAME passes
// the launcher's own value of NAME.
func ResolveEnv(flags []string, lookup func(string) (string, bool)) ([][]byte, error) {
	env := make([][]byte, 0, len(flags))
	for _, f := range flags {
		if strings.Contains(f, "=") {
			env = append(env, []byte(f))
			continue
		}
		if f == "" {
			return nil, errors.New("-x needs NAME or NAME=value, not an empty string")
		}
		v, ok := lookup(f)
		if !ok {
			return nil, fmt.Errorf("-x %s: %s is not set in the launcher's environment (use -x %s=value to set it)", f, f, f)
		}
		env = append(env, []byte(f+"="+v))
	}
	return env, nil
}

// Workdir is the working directory a job on the embedded default gets when
// none is given: the launcher's own, as the kernel names it (any bytes).
func Workdir() ([]byte, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("the current directory: %w (give --workdir)", err)
	}
	return []byte(dir), nil
}

// Stdin is the --stdin flag: which ranks read the launcher's stdin. "0"
// (the default, as mpirun does), any other rank, "all" for a copy to every
// rank, or "none" for /dev/null everywhere.
type Stdin struct {
	all, none bool
	rank      int32
}

func (s *Stdin) Set(v string) error {
	switch v {
	case "all":
		*s = Stdin{all: true}
		return nil
	case "none":
		*s = Stdin{none: true}
		return nil
	}
	r, err := strconv.ParseInt(v, 10, 32)
	if err != nil || r < 0 {
		return errors.New("want a rank (0, 1, ...), all or none")
	}
	*s = Stdin{rank: int32(r)}
	return nil
}

func (s *Stdin) String() string {
	switch {
	case s.all:
		return "all"
	case s.none:
		return "none"
	}
	return strconv.Itoa(int(s.rank))
}

// Apply sets spec's stdin fields.
func (s *Stdin) Apply(spec *musterv1.JobSpec) {
	spec.StdinAll, spec.StdinRank = s.all, nil
	if !s.all && !s.none {
		r := s.rank
		spec.StdinRank = &r
	}
}

// wantsStdin says whether some rank of spec reads the launcher's stdin.
func wantsStdin(spec *musterv1.JobSpec) bool { return spec.GetStdinAll() || spec.StdinRank != nil }
