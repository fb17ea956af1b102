// Package jobspec checks a job's spec (Validate) and fills in its defaults
// (Defaults): the launcher before it submits, the store when a job comes in,
// and an agent when an assignment arrives all apply the same rules.
package jobspec

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on specs: every network input is bounded. The launcher and agents
// refuse counts above MaxNodes, MaxGPUs and MaxNProc as they parse them, and
// the store bounds registrations by them too.
const (
	maxArgs      = 4096
	maxArgBytes  = 1 << 20
	maxEnv       = 4096
	maxEnvBytes  = 1 << 20
	MaxNodes     = 10_000
	MaxRestarts  = 10_000
	MaxGPUs      = 1024
	MaxNProc     = 4096
	maxPathBytes = 4096
	maxHostBytes = 255
)

// MaxTopologyBytes bounds the hardware topology an agent publishes with its
// node (marshalled): a DGX's is about 3 KiB.
const MaxTopologyBytes = 64 << 10

// MaxBindingBytes bounds the binding an agent sends with a worker's start
// (marshalled): every start of a job carries one, so it stays small.
const MaxBindingBytes = 4 << 10

// RosterInlineNodes is the most nodes a job may have for every node's
// assignment to carry the roster; beyond it only node rank 0's does.
const RosterInlineNodes = 64

// MPICH is JobSpec.mpi for MPICH programs (and Intel MPI's, which speak the
// same PMI-1): the agents serve their PMI, so no mpiexec is needed.
const MPICH = "mpich"

// OpenMPI is JobSpec.mpi for Open MPI programs: Open MPI's own mpirun runs on
// node rank 0, with the agents as its remote shell.
const OpenMPI = "openmpi"

// WorkersPerNode is how many workers a round of spec runs on each node. An
// Open MPI job runs one, mpirun or its node's daemon, which starts the node's
// spec.Nproc ranks itself.
func WorkersPerNode(spec *musterv1.JobSpec) int32 {
	if spec.GetMpi() == OpenMPI {
		return 1
	}
	return spec.GetNproc()
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// termName is what a TERM sent with --tty may be: a terminfo entry's name.
var termName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// MaxRankSpans bounds the ranks a --tty names (--output-ranks' list).
const MaxRankSpans = 1024

// LeastNodes is the fewest nodes a round of spec may form with: --nnodes
// MIN:MAX's MIN for an elastic job, else its node count.
func LeastNodes(spec *musterv1.JobSpec) int {
	if spec.MinNodes > 0 {
		return int(spec.MinNodes)
	}
	return int(spec.Nnodes)
}

// Defaults fills in what a spec leaves out: one worker per GPU, or one
// worker when neither GPUs nor workers are asked for.
func Defaults(spec *musterv1.JobSpec) {
	if spec.Nproc == 0 {
		spec.Nproc = max(spec.Gpus, 1)
	}
}

// MinMemoryLimit is the smallest --memory-limit: less leaves a worker no
// room to exec its program.
const MinMemoryLimit = 1 << 20

// cpuBindModes are the names of package topology's binding modes, as a
// launcher sends them ("" is none).
var cpuBindModes = []string{"", "none", "numa", "socket", "cores"}

// Validate checks a job spec, as Defaults will fill it in; it changes
// nothing. The command, environment and directories may hold any bytes but
// NUL, as on Unix.
func Validate(spec *musterv1.JobSpec) error {
	if spec == nil || len(spec.Argv) == 0 || len(spec.Argv[0]) == 0 {
		return fmt.Errorf("no command to run")
	}
	if len(spec.Argv) > maxArgs {
		return fmt.Errorf("command has %d arguments, more than %d", len(spec.Argv), maxArgs)
	}
	if n := totalLen(spec.Argv); n > maxArgBytes {
		return fmt.Errorf("command is %d bytes, more than %d", n, maxArgBytes)
	}
	for i, a := range spec.Argv {
		if bytes.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("argument %d of the command holds a NUL byte", i)
		}
	}
	switch {
	case spec.Nnodes < 1 || spec.Nnodes > MaxNodes:
		return fmt.Errorf("--nnodes %d is outside 1..%d", spec.Nnodes, MaxNodes)
	case spec.Gpus < 0 || spec.Gpus > MaxGPUs:
		return fmt.Errorf("--gpus %d is outside 0..%d", spec.Gpus, MaxGPUs)
	case spec.Nproc < 0 || spec.Nproc > MaxNProc:
		return fmt.Errorf("--nproc %d is outside 0..%d", spec.Nproc, MaxNProc)
	case spec.Gpus > 0 && spec.Nproc > 0 && spec.Gpus%spec.Nproc != 0:
		return fmt.Errorf("--gpus %d is not a multiple of --nproc %d: each worker gets --gpus/--nproc GPUs", spec.Gpus, spec.Nproc)
	case spec.KillTimeoutMs < 0:
		return fmt.Errorf("--kill-timeout is negative")
	case spec.MemoryLimitBytes < 0 || (spec.MemoryLimitBytes > 0 && spec.MemoryLimitBytes < MinMemoryLimit):
		return fmt.Errorf("--memory-limit %d bytes is below %d (1 MiB)", spec.MemoryLimitBytes, MinMemoryLimit)
	case spec.TimeoutMs < 0:
		return fmt.Errorf("--timeout is negative")
	case spec.MinNodes < 0 || spec.MinNodes > spec.Nnodes:
		return fmt.Errorf("--nnodes %d:%d: the least nodes must be in 1..%d", spec.MinNodes, spec.Nnodes, spec.Nnodes)
	case spec.MaxRestarts < 0 || spec.MaxRestarts > MaxRestarts:
		return fmt.Errorf("--max-restarts %d is outside 0..%d", spec.MaxRestarts, MaxRestarts)
	case spec.LastCallMs < 0:
		return fmt.Errorf("--last-call is negative")
	case len(spec.LogDir) > maxPathBytes || len(spec.Workdir) > maxPathBytes || len(spec.Name) > kv.MaxKeyBytes:
		return fmt.Errorf("--log-dir, working directory or name longer than %d bytes", maxPathBytes)
	case bytes.IndexByte(spec.LogDir, 0) >= 0:
		return fmt.Errorf("--log-dir %q holds a NUL byte", spec.LogDir)
	case bytes.IndexByte(spec.Workdir, 0) >= 0:
		return fmt.Errorf("working directory %q holds a NUL byte", spec.Workdir)
	case spec.Mpi != "" && spec.Mpi != MPICH && spec.Mpi != OpenMPI:
		return fmt.Errorf("--mpi %.40q: want mpich or openmpi", spec.Mpi)
	case !slices.Contains(cpuBindModes, spec.CpuBind):
		return fmt.Errorf("--cpu-bind %.40q: want none, numa, socket or cores", spec.CpuBind)
	}
	if err := validateHang(spec); err != nil {
		return err
	}
	if err := validateHosts(spec); err != nil {
		return err
	}
	if err := validateRestartPolicy(spec); err != nil {
		return err
	}
	if err := validateHealthCheck(spec); err != nil {
		return err
	}
	if err := validateTerminal(spec.GetTty()); err != nil {
		return err
	}
	if r := spec.StdinRank; r != nil {
		// An elastic job's smallest round has the fewest ranks.
		filled := &musterv1.JobSpec{Nproc: spec.Nproc, Gpus: spec.Gpus, Mpi: spec.Mpi}
		Defaults(filled)
		if world := int64(LeastNodes(spec)) * int64(WorkersPerNode(filled)); *r < 0 || int64(*r) >= world {
			return fmt.Errorf("--stdin %d: the job's ranks are 0..%d", *r, world-1)
		}
		if spec.StdinAll {
			return fmt.Errorf("--stdin: give one rank or all, not both")
		}
	}
	if len(spec.Env) > maxEnv || totalLen(spec.Env) > maxEnvBytes {
		return fmt.Errorf("environment has %d variables or %d bytes, more than %d or %d", len(spec.Env), totalLen(spec.Env), maxEnv, maxEnvBytes)
	}
	for _, kv := range spec.Env {
		name, _, ok := bytes.Cut(kv, []byte("="))
		if !ok || !envName.Match(name) {
			return fmt.Errorf("--env %q: want NAME=value with NAME of letters, digits and '_'", kv)
		}
		if bytes.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("--env %s: the value holds a NUL byte", name)
		}
	}
	return nil
}

// Bounds on hang timeouts: an agent checks its workers' heartbeats a few
// times per timeout, and a timeout shorter than a check is no timeout.
const (
	MinHangTimeout = 100 * time.Millisecond
	MaxHangTimeout = 30 * 24 * time.Hour
)

func validateHang(spec *musterv1.JobSpec) error {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	switch hang, first := spec.HangTimeoutMs, spec.HangFirstTimeoutMs; {
	case hang == 0 && first != 0:
		return fmt.Errorf("--hang-first-timeout needs --hang-timeout")
	case hang == 0 && spec.HangOnSilence:
		return fmt.Errorf("--hang-on-silence needs --hang-timeout")
	case hang != 0 && spec.Mpi == OpenMPI:
		return fmt.Errorf("--hang-timeout and --mpi openmpi: a node's one worker is mpirun or its daemon, not a rank; use --mpi mpich or no --mpi")
	case hang != 0 && (hang < ms(MinHangTimeout) || hang > ms(MaxHangTimeout)):
		return fmt.Errorf("--hang-timeout %s is outside %s..%s", time.Duration(hang)*time.Millisecond, MinHangTimeout, MaxHangTimeout)
	case first != 0 && (first < ms(MinHangTimeout) || first > ms(MaxHangTimeout)):
		return fmt.Errorf("--hang-first-timeout %s is outside %s..%s", time.Duration(first)*time.Millisecond, MinHangTimeout, MaxHangTimeout)
	}
	return nil
}

// validateTerminal bounds --tty's window size, TERM and ranks.
func validateTerminal(t *musterv1.Terminal) error {
	if t == nil {
		return nil
	}
	switch {
	case !t.Stdout && !t.Stderr:
		return fmt.Errorf("--tty: neither stdout nor stderr is a terminal")
	case t.Rows > 0xffff || t.Cols > 0xffff:
		return fmt.Errorf("--tty: window size %dx%d is more than 65535", t.Cols, t.Rows)
	case t.Term != "" && !termName.MatchString(t.Term):
		return fmt.Errorf("--tty: TERM %.40q is not a terminal type's name", t.Term)
	case len(t.Ranks) > MaxRankSpans:
		return fmt.Errorf("--tty: %d rank ranges, more than %d", len(t.Ranks), MaxRankSpans)
	}
	for _, sp := range t.Ranks {
		if sp.First < 0 || sp.Last < sp.First {
			return fmt.Errorf("--tty: ranks %d-%d are not a range of ranks", sp.First, sp.Last)
		}
	}
	return nil
}

// TerminalRank says whether rank gets t's pseudo-terminals; no rank does
// when t is nil.
func TerminalRank(t *musterv1.Terminal, rank int32) bool {
	if t == nil {
		return false
	}
	if len(t.Ranks) == 0 {
		return true
	}
	for _, sp := range t.Ranks {
		if rank >= sp.First && rank <= sp.Last {
			return true
		}
	}
	return false
}

// validateHosts bounds the placement lists: each is read on every round a
// job forms, and travels in every node's assignment.
func validateHosts(spec *musterv1.JobSpec) error {
	for _, l := range []struct {
		flag  string
		names []string
	}{{"--host/--hostfile", spec.Hosts}, {"--exclude", spec.Exclude}} {
		if len(l.names) > MaxNodes {
			return fmt.Errorf("%s: %d hosts, more than %d", l.flag, len(l.names), MaxNodes)
		}
		for _, h := range l.names {
			switch {
			case h == "":
				return fmt.Errorf("%s: an empty host name", l.flag)
			case len(h) > maxHostBytes:
				return fmt.Errorf("%s: host name %.20q... is longer than %d bytes", l.flag, h, maxHostBytes)
			case !utf8.ValidString(h):
				return fmt.Errorf("%s: host name %q is not UTF-8", l.flag, h)
			}
		}
	}
	seen := make(map[string]bool, len(spec.Hosts))
	for _, h := range spec.Hosts {
		if seen[h] {
			return fmt.Errorf("--host/--hostfile: host %q is listed twice", h)
		}
		seen[h] = true
	}
	if len(spec.Hosts) > 0 && int(spec.Nnodes) > len(spec.Hosts) {
		return fmt.Errorf("--nnodes %d is more than the %d hosts listed", spec.Nnodes, len(spec.Hosts))
	}
	return nil
}

func totalLen[T ~string | ~[]byte](ss []T) int {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	return n
}

// Bounds on the restart policy and the health check.
const (
	maxNoRestartCodes    = 256
	MaxHealthCheckBytes  = 64 << 10
	DefaultHealthTimeout = 60 * time.Second
)

// validateRestartPolicy checks --no-restart-exit-codes, --restart-on and
// the back-off.
func validateRestartPolicy(spec *musterv1.JobSpec) error {
	codes := spec.GetNoRestartExitCodes()
	if len(codes) > maxNoRestartCodes {
		return fmt.Errorf("--no-restart-exit-codes: %d codes, more than %d", len(codes), maxNoRestartCodes)
	}
	for _, c := range codes {
		if c < 1 || c > 255 {
			return fmt.Errorf("--no-restart-exit-codes: %d is not an exit code in 1..255", c)
		}
	}
	switch {
	case spec.GetRestartOn() < musterv1.RestartOn_RESTART_ON_UNSPECIFIED || spec.GetRestartOn() > musterv1.RestartOn_RESTART_ON_NODE_LOSS:
		return fmt.Errorf("--restart-on: unknown value %d", spec.GetRestartOn())
	case spec.GetRestartBackoffMs() < 0 || spec.GetRestartBackoffMaxMs() < 0:
		return fmt.Errorf("--restart-backoff or --restart-backoff-max is negative")
	}
	return nil
}

// validateHealthCheck checks the job's --health-check command.
func validateHealthCheck(spec *musterv1.JobSpec) error {
	cmd := spec.GetHealthCheck()
	switch {
	case len(cmd) > MaxHealthCheckBytes:
		return fmt.Errorf("--health-check: %d bytes, more than %d", len(cmd), MaxHealthCheckBytes)
	case bytes.IndexByte(cmd, 0) >= 0:
		return fmt.Errorf("--health-check holds a NUL byte")
	case spec.GetHealthCheckTimeoutMs() < 0:
		return fmt.Errorf("--health-check-timeout is negative")
	}
	return nil
}

// ParseRestartOn reads --restart-on: any (the default) or node-loss.
func ParseRestartOn(s string) (musterv1.RestartOn, error) {
	switch s {
	case "any", "":
		return musterv1.RestartOn_RESTART_ON_ANY, nil
	case "node-loss":
		return musterv1.RestartOn_RESTART_ON_NODE_LOSS, nil
	}
	return 0, fmt.Errorf("--restart-on %.40q: want any or node-loss", s)
}
