// Package entrypoint is `agent run`: the same line in every container or
// batch step of a multi-node job. The node that is node rank 0 (or whose
// address is the rendezvous host) hosts the store and submits the job; the
// others join it. Every node exits when the job ends, with its exit code.
package entrypoint

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/fabric"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/launch"
	"github.com/musterhq/muster/platform"
)

// DefaultRdzvPort is the rendezvous port when --rdzv gives none, as
// torchrun's c10d rendezvous has it.
const DefaultRdzvPort = 29400

// Config is what the command line gives; Resolve fills the rest from the
// platform. Counts of 0 and a node rank of -1 mean not given.
type Config struct {
	Logger *zap.Logger
	// Rdzv is HOST[:PORT] of the rendezvous; Host makes this node host it
	// whatever its address.
	Rdzv        string
	Host        bool
	NNodes      int
	MinNodes    int
	GPUs        int
	NProc       int
	NodeRank    int
	MaxRestarts int
	JoinTimeout time.Duration
	LastCall    time.Duration
	KillTimeout time.Duration
	// NodeTimeout is how long a node may be silent before gossip declares
	// it dead (0: cluster.DefaultNodeTimeout); the same on every node.
	NodeTimeout time.Duration
	Argv        []string
	// MPI is the job's --mpi: "" or "mpich".
	MPI string
	// NoAgentStore leaves PyTorch's TCPStore to rank 0 (--no-agent-store).
	NoAgentStore bool
	// Policy is the job's restart policy and health check, as the
	// launcher's flags of the same names give them.
	Policy launch.Policy
	// MemoryLimit is each worker's memory limit in bytes, 0 for none
	// (--memory-limit).
	MemoryLimit int64
	// OutputRanks, when set, says which ranks' output the host prints
	// (--output-ranks); TimestampOutput stamps each line (--timestamp-output).
	OutputRanks     func(rank int32) bool
	TimestampOutput bool
	// ReportBindings has the host print each rank's binding as it starts
	// (--report-bindings).
	ReportBindings bool
	// CPUBind binds each worker's CPUs and memory to its GPUs' (--cpu-bind:
	// numa, socket, cores; "" for none).
	CPUBind string
	// Token is the cluster token every node shares.
	Token string
	// Name and Addr are this node's name (default: the host name) and its
	// address for workers (default: its gossip address).
	Name, Addr string
	// MetricsAddr serves the node's metrics and probes there, when set.
	MetricsAddr string
	// GPUDevices is this node's GPUs; GPUError says why none were found.
	// GPUsExpected says why it should have some, "" on a CPU node (see
	// node.Config).
	GPUDevices   []gpu.Device
	GPUError     string
	GPUsExpected string
	Environ      []string
	Stdout       io.Writer
	Stderr       io.Writer
	// Signals delivers SIGTERM, SIGINT and SIGHUP: the first stops the job
	// gracefully, the second at once; and the signals of Forward.
	Signals <-chan os.Signal
	// Forward are the signals sent on to every worker of the job instead
	// (--forward-signals). Every node may get the platform's signal at
	// once: the store takes those within a second as one.
	Forward []syscall.Signal
	// HangTimeout, HangFirstTimeout and HangOnSilence are the job's
	// --hang-timeout, --hang-first-timeout and --hang-on-silence.
	HangTimeout, HangFirstTimeout time.Duration
	HangOnSilence                 bool
	// StoreReplicas is --store-replicas: 0 or 1 is one store, on node rank
	// 0; 3 or 5 replicate it on node ranks 0..N-1 (replicated.go).
	StoreReplicas int
	// StorePeers is --store-peers: the replicas' HOST[:PORT], node rank 0's
	// first; by default the platform's names of those nodes.
	StorePeers []string
	// Fabric is this node's place in the network (--topology, or what
	// Slurm or the GPUs say): the store orders node ranks without one by it.
	Fabric fabric.Path
}

// Plan is what a node does: Config with the platform's answers filled in,
// and where each came from.
type Plan struct {
	Config
	RdzvHost string
	RdzvPort int
	Platform string
	// From names, by field, where its value came from: a flag or a variable.
	From map[string]string
	// Peers are the store's replicas, HOST:PORT, node rank i's at i, when
	// Replicated.
	Peers []string
}

// Replicated says whether the store has replicas on the first nodes.
func (p *Plan) Replicated() bool { return len(p.Peers) > 1 }

// Resolve fills what the flags leave out from the platform's variables
// (flags win) and checks that the node can take part. set says which flags
// were given on the command line or by their own variables.
func Resolve(cfg Config, det platform.Detected, set func(flag string) bool) (*Plan, error) {
	p := &Plan{Config: cfg, Platform: det.Platform, From: map[string]string{}}
	from := func(field, flag string) {
		if set(flag) {
			p.From[field] = "--" + flag
		} else if v := det.From[field]; v != "" {
			p.From[field] = v
		}
	}
	if cfg.Rdzv != "" {
		host, port, err := splitRdzv(cfg.Rdzv)
		if err != nil {
			return nil, err
		}
		p.RdzvHost, p.RdzvPort = host, port
		p.From["RdzvHost"], p.From["RdzvPort"] = "--rdzv", "--rdzv"
	} else {
		p.RdzvHost, p.RdzvPort = det.RdzvHost, det.RdzvPort
		from("RdzvHost", "rdzv")
		from("RdzvPort", "rdzv")
		if p.RdzvPort == 0 {
			p.RdzvPort = DefaultRdzvPort
			p.From["RdzvPort"] = "default"
		}
	}
	if !set("nnodes") && det.NNodes > 0 {
		p.NNodes, p.MinNodes = det.NNodes, det.MinNodes
	}
	from("NNodes", "nnodes")
	if p.MinNodes > 0 {
		from("MinNodes", "nnodes")
	}
	if !set("node-rank") && det.NodeRank >= 0 {
		p.NodeRank = det.NodeRank
	}
	from("NodeRank", "node-rank")
	if err := p.resolvePeers(det); err != nil {
		return nil, err
	}
	if !set("gpus") && !set("nproc") && det.GPUsPerNode > 0 {
		p.GPUs = det.GPUsPerNode
		from("GPUsPerNode", "gpus")
	}
	switch {
	case p.NNodes < 1:
		return nil, fmt.Errorf("--nnodes: how many nodes the job has is not known: give --nnodes N or MIN:MAX (or MUSTER_NNODES)")
	case p.MinNodes > p.NNodes:
		return nil, fmt.Errorf("--nnodes %d:%d: the minimum is above the maximum", p.MinNodes, p.NNodes)
	case p.NodeRank >= p.NNodes:
		return nil, fmt.Errorf("node rank %d (%s) is not below the %d nodes", p.NodeRank, p.From["NodeRank"], p.NNodes)
	case p.RdzvHost == "" && !p.Host && p.Platform == platform.KubernetesIndexedJob:
		return nil, fmt.Errorf("--rdzv: the rendezvous host is not known: an indexed Job's pod names index 0's pod from " +
			"its host name and /etc/hosts, which needs the pod's subdomain set to a headless Service; or give --rdzv HOST[:PORT] (or MUSTER_RDZV)")
	case p.RdzvHost == "" && !p.Host:
		return nil, fmt.Errorf("--rdzv: the rendezvous host is not known: give --rdzv HOST[:PORT] (or MUSTER_RDZV), " +
			"the address of node rank 0, the same on every node")
	case p.Token == "":
		return nil, fmt.Errorf("agent run needs the cluster token, the same on every node: set MUSTER_TOKEN " +
			"(a Kubernetes Secret, a compose variable) or --token-file; make one with `openssl rand -hex 32`")
	case len(p.Argv) == 0:
		return nil, fmt.Errorf("no command given: agent run [flags] -- COMMAND [ARGS...]")
	}
	return p, nil
}

// hostName is what a rendezvous host may be when it is not an IP address.
// Its length is checked apart: a counted repetition compiles to a program
// that long, built at start-up.
var hostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// splitRdzv parses HOST[:PORT], HOST an IP address (IPv6 in brackets) or a
// host name.
func splitRdzv(s string) (string, int, error) {
	host, port := s, DefaultRdzvPort
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("--rdzv %q: port %q is not in 1..65535", s, p)
		}
		host, port = h, n
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	switch _, err := netip.ParseAddr(host); {
	case host == "":
		return "", 0, fmt.Errorf("--rdzv %q: no host", s)
	case err != nil && (len(host) > 253 || !hostName.MatchString(host)):
		return "", 0, fmt.Errorf("--rdzv %q: want HOST[:PORT], HOST an IP address or a host name", s)
	case err == nil && netip.MustParseAddr(host).IsUnspecified():
		return "", 0, fmt.Errorf("--rdzv %q: an unspecified address names no node: give node rank 0's address or name", s)
	}
	return host, port, nil
}

// Endpoint is the rendezvous as HOST:PORT.
func (p *Plan) Endpoint() string { return net.JoinHostPort(p.RdzvHost, strconv.Itoa(p.RdzvPort)) }

// Describe says what the node found and will do, one fact a line, each with
// where it came from: `agent run --dry-run` prints it.
func (p *Plan) Describe(role string) []string {
	src := func(field string) string {
		if f := p.From[field]; f != "" {
			return " (" + f + ")"
		}
		return ""
	}
	platformName := p.Platform
	if platformName == "" {
		platformName = "none detected"
	}
	nodes := strconv.Itoa(p.NNodes)
	if p.MinNodes > 0 {
		nodes = fmt.Sprintf("%d:%d (elastic)", p.MinNodes, p.NNodes)
	}
	rank := "by name, after the ranked nodes"
	if p.NodeRank >= 0 {
		rank = strconv.Itoa(p.NodeRank)
	}
	store := "served on MASTER_PORT by node rank 0's agent (TORCHELASTIC_USE_AGENT_STORE=True)"
	if p.NoAgentStore {
		store = "hosted by rank 0 (--no-agent-store)"
	}
	per := fmt.Sprintf("%d GPUs", p.GPUs)
	switch {
	case p.NProc > 0:
		per += fmt.Sprintf(", %d workers", p.NProc)
	case p.GPUs > 0:
		per += ", a worker each"
	default:
		per = "no GPUs, 1 worker"
	}
	lines := []string{
		"platform: " + platformName,
		"rendezvous: " + p.Endpoint() + src("RdzvHost"),
		"role: " + role,
		"nodes: " + nodes + src("NNodes"),
		"node rank: " + rank + src("NodeRank"),
		"fabric: " + cmp.Or(p.Fabric.String(), "none"),
		"per node: " + per + src("GPUsPerNode"),
		fmt.Sprintf("restarts: at most %d, job-wide; join timeout %s; last call %s", p.MaxRestarts, p.JoinTimeout, p.LastCall),
		"PyTorch's TCPStore: " + store,
		"command: " + strings.Join(p.Argv, " "),
	}
	if p.Replicated() {
		line := fmt.Sprintf("store: %d replicas, on node ranks 0..%d: %s%s; each of them submits the job and follows it",
			len(p.Peers), len(p.Peers)-1, strings.Join(p.Peers, ","), src("StorePeers"))
		lines = append(lines[:3], append([]string{line}, lines[3:]...)...)
	}
	return lines
}
