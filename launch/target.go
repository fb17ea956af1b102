package launch

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/musterhq/muster/ownfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
)

// UsageError is a command line that asks for what cannot be: the launcher
// exits 2 on it, as on one that does not parse.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// Target is where a job runs.
type Target struct {
	// Store is a cluster's store: --cluster, or the socket of an agent
	// serving this machine. Empty is the embedded default: a store and an
	// agent inside the launcher, for this machine alone.
	Store string
	// Replicas are a replicated store's replicas (--cluster A,B,C), Store
	// among them; the launcher follows their leader.
	Replicas []string
}

// Embedded says the job runs on the embedded default.
func (t Target) Embedded() bool { return t.Store == "" }

// ChooseTarget picks where a job runs: on the embedded default with
// embedded (--embedded); on the store cluster names (--cluster); else on the
// agent serving this machine that findLocal finds (its socket's address);
// else on the embedded default.
func ChooseTarget(embedded bool, cluster string, findLocal func() string) (Target, error) {
	if embedded {
		if cluster != "" {
			return Target{}, usagef("--embedded and --cluster (or MUSTER_CLUSTER): give one")
		}
		return Target{}, nil
	}
	addrs, err := ClusterAddrs(cluster, findLocal)
	if err != nil || len(addrs) == 0 {
		return Target{}, err
	}
	t := Target{Store: addrs[0]}
	if len(addrs) > 1 {
		t.Replicas = addrs
	}
	return t, nil
}

// ClusterAddr is the store a command asks first: see ClusterAddrs.
func ClusterAddr(cluster string, findLocal func() string) (string, error) {
	addrs, err := ClusterAddrs(cluster, findLocal)
	if err != nil || len(addrs) == 0 {
		return "", err
	}
	return addrs[0], nil
}

// maxClusterAddrs bounds --cluster's list: a store's replicas.
const maxClusterAddrs = 7

// ClusterAddrs are the store a command asks: cluster (--cluster: one
// address, or a replicated store's replicas, A,B,C), checked, else the
// agent serving this machine that findLocal finds, else none.
func ClusterAddrs(cluster string, findLocal func() string) ([]string, error) {
	if cluster == "" {
		if a := findLocal(); a != "" {
			return []string{a}, nil
		}
		return nil, nil
	}
	parts := strings.Split(cluster, ",")
	if len(parts) > maxClusterAddrs {
		return nil, usagef("--cluster lists %d stores: a store has at most %d replicas", len(parts), maxClusterAddrs)
	}
	var addrs []string
	for _, p := range parts {
		addr := security.NormalizeAddr(strings.TrimSpace(p))
		if err := security.CheckAddr(addr); err != nil {
			return nil, usagef("--cluster %v", err)
		}
		if len(parts) > 1 && security.IsUnixAddr(addr) {
			return nil, usagef("--cluster %s: a list names a replicated store's replicas, HOST:PORT each; a socket stands alone", cluster)
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// ClusterSecurity is how to authenticate to the store at addr. On a Unix
// socket the kernel names the caller; over TCP the cluster token does
// (MUSTER_TOKEN, tokenFile, or a default token file this user can read),
// and goes over a network only with TLS (caFile, --tls-ca).
func ClusterSecurity(addr, tokenFile, caFile string) (security.Security, error) {
	sec := security.Security{CAFile: caFile}
	if security.IsUnixAddr(addr) {
		return sec, nil
	}
	tok, _, err := security.ResolveToken(security.TokenSource{File: tokenFile, Find: true})
	if err != nil {
		return sec, err
	}
	sec.Token = tok
	if host, _, err := net.SplitHostPort(addr); err == nil && tok != "" && sec.CAFile == "" && !security.IsLoopback(host) {
		return sec, usagef("--cluster %s: the cluster token is never sent in clear text over a network: give --tls-ca (the CA of the store's certificate)", addr)
	}
	return sec, nil
}

// Prepare fits spec to where it runs. A cluster's job waits up to
// waitTimeout for its nodes; the embedded default's one node is there from
// the start, and it has no other nodes to choose or more than one to run.
// A job on this machine starts in the current directory unless --workdir
// says otherwise; on the embedded default a --workdir that is no directory
// is a usage error now. workersSet says --nproc or --gpus was given, for
// the hint of the --nnodes error.
func (t Target) Prepare(spec *musterv1.JobSpec, waitTimeout time.Duration, workersSet bool) error {
	if !t.Embedded() {
		spec.WaitTimeoutMs = waitTimeout.Milliseconds()
		if security.IsUnixAddr(t.Store) && len(spec.Workdir) == 0 {
			// The agent is on this machine: the job starts where the launcher is.
			return setWorkdir(spec)
		}
		return nil
	}
	if len(spec.Hosts) > 0 || len(spec.Exclude) > 0 {
		return usagef("-H, --hostfile and --exclude choose a cluster's nodes: give --cluster HOST:PORT (or set MUSTER_CLUSTER)")
	}
	if spec.Nnodes > 1 {
		// -n on its own reads as mpirun's -n (workers); with --nproc or --gpus it is nodes.
		hint := fmt.Sprintf(" (for %d workers here, give -np %d)", spec.Nnodes, spec.Nnodes)
		if workersSet {
			hint = ""
		}
		return usagef("--nnodes %d needs a cluster: without --cluster the launcher runs one node, this one%s, "+
			"and no agent's socket answers here (%s). On a cluster's head node its agent's socket takes the job; "+
			"elsewhere pass --cluster HOST:PORT (or set MUSTER_CLUSTER); see docs/cluster.md",
			spec.Nnodes, hint, strings.Join(security.LocalAgentSockets(), ", "))
	}
	if dir := string(spec.LogDir); dir != "" {
		// This machine's agent writes there: a directory it cannot make
		// is the flag's fault, not a rank's. Another user's link or
		// directory on the way would lead the logs to them.
		if err := ownfile.MkdirAll(dir, 0o755, os.Geteuid()); err != nil {
			return usagef("--log-dir: %v", err)
		}
	}
	if len(spec.Workdir) == 0 {
		return setWorkdir(spec)
	}
	if fi, err := os.Stat(string(spec.Workdir)); err != nil || !fi.IsDir() {
		// This machine runs the job: say so now.
		what := "does not exist"
		if err == nil {
			what = "is not a directory"
		}
		return usagef("--workdir %q %s", spec.Workdir, what)
	}
	return nil
}

func setWorkdir(spec *musterv1.JobSpec) error {
	wd, err := Workdir()
	spec.Workdir = wd
	return err
}

// Reattach is how long a launcher that lost a cluster's store tries to
// follow its job again: as long as a job may wait for its nodes by default,
// time for a store's machine to be restarted. The agents keep the job
// meanwhile, and a restarted store takes it over from them. The embedded
// store cannot restart.
func (t Target) Reattach() time.Duration {
	if t.Embedded() {
		return 0
	}
	return 10 * time.Minute
}

// Liveness is how often the launcher checks that a quiet cluster store
// still answers; the embedded store lives in the launcher itself.
func (t Target) Liveness() time.Duration {
	if t.Embedded() {
		return 0
	}
	return 2 * time.Second
}
