package rendezvous

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"unicode/utf8"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on specs and registrations: every network input is bounded.
const (
	maxArgs        = 4096
	maxArgBytes    = 1 << 20
	maxEnv         = 4096
	maxEnvBytes    = 1 << 20
	maxNodes       = 10_000
	maxGPUs        = 1024
	maxNProc       = 4096
	maxPathBytes   = 4096
	maxOutputBytes = 1 << 20
)

var (
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
)

func validateNode(n *musterv1.Node) error {
	if n == nil {
		return fmt.Errorf("register: no node")
	}
	if !nodeName.MatchString(n.GetName()) {
		return fmt.Errorf("register: node name %q is not a host name (letters, digits, '.', '_', '-', at most 253)", n.GetName())
	}
	if _, err := netip.ParseAddr(n.GetAddr()); err != nil {
		return fmt.Errorf("register: node %s: address %q is not an IP address", n.GetName(), n.GetAddr())
	}
	if len(n.GetGpus()) > maxGPUs {
		return fmt.Errorf("register: node %s offers %d GPUs, more than %d", n.GetName(), len(n.GetGpus()), maxGPUs)
	}
	seen := map[int32]bool{}
	for _, g := range n.GetGpus() {
		if g.GetIndex() < 0 || seen[g.GetIndex()] {
			return fmt.Errorf("register: node %s: GPU index %d is negative or repeated", n.GetName(), g.GetIndex())
		}
		seen[g.GetIndex()] = true
	}
	if n.GetRank() < -1 || n.GetRank() >= maxNodes {
		return fmt.Errorf("register: node %s: node rank %d is outside -1..%d", n.GetName(), n.GetRank(), maxNodes-1)
	}
	return nil
}

// ValidateSpec checks a job spec and fills its defaults (one worker per GPU,
// or one worker when neither GPUs nor workers are asked for).
func ValidateSpec(spec *musterv1.JobSpec) error {
	if spec == nil || len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return fmt.Errorf("no command to run")
	}
	if len(spec.Argv) > maxArgs {
		return fmt.Errorf("command has %d arguments, more than %d", len(spec.Argv), maxArgs)
	}
	if n := totalLen(spec.Argv); n > maxArgBytes {
		return fmt.Errorf("command is %d bytes, more than %d", n, maxArgBytes)
	}
	switch {
	case spec.Nnodes < 1 || spec.Nnodes > maxNodes:
		return fmt.Errorf("--nnodes %d is outside 1..%d", spec.Nnodes, maxNodes)
	case spec.Gpus < 0 || spec.Gpus > maxGPUs:
		return fmt.Errorf("--gpus %d is outside 0..%d", spec.Gpus, maxGPUs)
	case spec.Nproc < 0 || spec.Nproc > maxNProc:
		return fmt.Errorf("--nproc %d is outside 0..%d", spec.Nproc, maxNProc)
	case spec.Gpus > 0 && spec.Nproc > 0 && spec.Gpus%spec.Nproc != 0:
		return fmt.Errorf("--gpus %d is not a multiple of --nproc %d: each worker gets --gpus/--nproc GPUs", spec.Gpus, spec.Nproc)
	case spec.KillTimeoutMs < 0:
		return fmt.Errorf("--kill-timeout is negative")
	case spec.TimeoutMs < 0:
		return fmt.Errorf("--timeout is negative")
	case len(spec.LogDir) > maxPathBytes || len(spec.Workdir) > maxPathBytes || len(spec.Name) > maxKeyBytes:
		return fmt.Errorf("--log-dir, working directory or name longer than %d bytes", maxPathBytes)
	}
	if spec.Nproc == 0 {
		spec.Nproc = max(spec.Gpus, 1)
	}
	if len(spec.Env) > maxEnv || totalLen(spec.Env) > maxEnvBytes {
		return fmt.Errorf("environment has %d variables or %d bytes, more than %d or %d", len(spec.Env), totalLen(spec.Env), maxEnv, maxEnvBytes)
	}
	for _, kv := range spec.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(name) {
			return fmt.Errorf("--env %q: want NAME=value with NAME of letters, digits and '_'", kv)
		}
		if !utf8.ValidString(kv) || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("--env %s: value is not valid UTF-8 or holds a NUL byte", name)
		}
	}
	return nil
}

func totalLen(ss []string) int {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	return n
}
