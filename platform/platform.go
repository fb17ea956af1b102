// Package platform detects, from environment variables (and for a Kubernetes
// indexed Job the pod's host name and /etc/hosts), where a container or batch
// step runs and what that platform says about the multi-node job it belongs
// to: the rendezvous host and port, the number of nodes, this node's rank and
// its GPUs.
package platform

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/musterhq/muster/hostfile"
)

// Platform names, as Detected.Platform gives them.
const (
	KubernetesIndexedJob = "kubernetes-indexed-job"
	PyTorchJob           = "pytorchjob"
	Dstack               = "dstack"
	Slurm                = "slurm"
)

// Bounds on what Detect accepts; anything outside them is a configuration
// error rather than a job muster could run.
const (
	MaxValueLen = 4096
	MaxCount    = 10000
)

// Detected is what the environment says about the job.
type Detected struct {
	Platform    string   // "kubernetes-indexed-job", "pytorchjob", "dstack", "slurm", or "" when none
	RdzvHost    string   // the rendezvous host (node rank 0's address or name), "" when not known
	RdzvPort    int      // 0 when not known
	NNodes      int      // 0 when not known
	MinNodes    int      // elastic minimum, 0 when not elastic
	NodeRank    int      // -1 when not known
	GPUsPerNode int      // 0 when not known
	NodeAddrs   []string // dstack's DSTACK_NODES_IPS, in order, when given
	// From names, for each field set, the variable it came from ("NodeRank": "JOB_COMPLETION_INDEX"),
	// or "hostname and /etc/hosts" for an indexed Job's RdzvHost.
	From map[string]string
}

// Sources is what detection reads.
type Sources struct {
	// Getenv reads the environment; it must be set.
	Getenv func(string) string
	// Hostname is the machine's (the pod's) host name; nil when not known.
	Hostname func() (string, error)
	// Hosts is the contents of /etc/hosts, "" when not known.
	Hosts string
}

// OSSources reads this process's environment, host name and /etc/hosts.
func OSSources() Sources {
	hosts, _ := os.ReadFile("/etc/hosts")
	return Sources{Getenv: os.Getenv, Hostname: os.Hostname, Hosts: string(hosts)}
}

// Detect reads the environment alone through getenv: as DetectFrom without a
// host name, so an indexed Job's rendezvous host stays unknown.
func Detect(getenv func(string) string) (Detected, error) {
	return DetectFrom(Sources{Getenv: getenv})
}

// DetectFrom returns the first platform whose key variable is set, checked
// in the order dstack, Slurm, PyTorchJob, Kubernetes indexed Job. dstack and
// Slurm come first because their steps may also carry MASTER_ADDR or
// JOB_COMPLETION_INDEX set by something else. An empty variable counts as
// unset. A value that does not parse, or is out of bounds, is an error naming
// the variable and its value.
func DetectFrom(src Sources) (Detected, error) {
	getenv := src.Getenv
	r := reader{src: src, d: Detected{NodeRank: -1, From: map[string]string{}}}
	switch {
	case getenv("DSTACK_NODE_RANK") != "":
		r.dstack()
	case getenv("SLURM_NODEID") != "" && getenv("SLURM_JOB_ID") != "":
		r.slurm()
	case getenv("PET_NODE_RANK") != "" || getenv("MASTER_ADDR") != "" && getenv("PET_NNODES") != "":
		r.pytorchjob()
	case getenv("JOB_COMPLETION_INDEX") != "":
		r.indexedJob()
	default:
		return Detected{NodeRank: -1, From: map[string]string{}}, nil
	}
	if r.err != nil {
		return Detected{NodeRank: -1, From: map[string]string{}}, r.err
	}
	r.checkRank()
	if r.err != nil {
		return Detected{NodeRank: -1, From: map[string]string{}}, r.err
	}
	return r.d, nil
}

// reader keeps the first error so that each platform reads as a plain list
// of fields.
type reader struct {
	src Sources
	d   Detected
	err error
}

func (r *reader) getenv(name string) string { return r.src.Getenv(name) }

func (r *reader) dstack() {
	r.platform(Dstack, "DSTACK_NODE_RANK")
	r.addr(&r.d.RdzvHost, "RdzvHost", "DSTACK_MASTER_NODE_IP")
	r.count(&r.d.NNodes, "NNodes", "DSTACK_NODES_NUM")
	r.rank("DSTACK_NODE_RANK")
	r.gpus(&r.d.GPUsPerNode, "GPUsPerNode", "DSTACK_GPUS_PER_NODE")

	v, ok := r.get("DSTACK_NODES_IPS")
	if !ok {
		return
	}
	ips := strings.Fields(v)
	for _, ip := range ips {
		if _, err := netip.ParseAddr(ip); err != nil {
			r.fail("DSTACK_NODES_IPS", v, fmt.Sprintf("%q is not an IP address", ip))
			return
		}
	}
	if len(ips) == 0 {
		return
	}
	if len(ips) > MaxCount {
		r.fail("DSTACK_NODES_IPS", v, fmt.Sprintf("more than %d addresses", MaxCount))
		return
	}
	if r.d.NNodes != 0 && len(ips) != r.d.NNodes {
		r.fail("DSTACK_NODES_IPS", v, fmt.Sprintf("%d addresses, but DSTACK_NODES_NUM=%q", len(ips), r.getenv("DSTACK_NODES_NUM")))
		return
	}
	r.d.NodeAddrs = ips
	r.d.From["NodeAddrs"] = "DSTACK_NODES_IPS"
}

func (r *reader) slurm() {
	r.platform(Slurm, "SLURM_NODEID")
	r.count(&r.d.NNodes, "NNodes", "SLURM_NNODES")
	r.rank("SLURM_NODEID")
	r.gpus(&r.d.GPUsPerNode, "GPUsPerNode", "SLURM_GPUS_ON_NODE")

	// Rank 0 of a step runs on the first node of the job's list.
	if v, ok := r.get("SLURM_JOB_NODELIST"); ok {
		hosts, err := hostfile.Expand(v)
		switch {
		case err != nil:
			r.fail("SLURM_JOB_NODELIST", v, err.Error())
		case len(hosts) > 0:
			r.d.RdzvHost = hosts[0]
			r.d.From["RdzvHost"] = "SLURM_JOB_NODELIST"
		}
	}
}

func (r *reader) pytorchjob() {
	key := "PET_NODE_RANK"
	if r.getenv(key) == "" {
		key = "PET_NNODES"
	}
	r.platform(PyTorchJob, key)
	r.host(&r.d.RdzvHost, "RdzvHost", "MASTER_ADDR")
	r.port(&r.d.RdzvPort, "RdzvPort", "MASTER_PORT")
	r.rank("PET_NODE_RANK")
	// PET_NPROC_PER_NODE is processes per node, which may be "gpu" or "auto"
	// or differ from the GPU count, so it is not read as GPUs.

	v, ok := r.get("PET_NNODES")
	if !ok {
		return
	}
	// Elastic jobs give "MIN:MAX"; the job may grow to MAX nodes.
	minS, maxS, elastic := strings.Cut(v, ":")
	if !elastic {
		r.count(&r.d.NNodes, "NNodes", "PET_NNODES")
		return
	}
	lo, err1 := parseCount(minS, 1)
	hi, err2 := parseCount(maxS, 1)
	switch {
	case err1 != nil:
		r.fail("PET_NNODES", v, "minimum "+err1.Error())
	case err2 != nil:
		r.fail("PET_NNODES", v, "maximum "+err2.Error())
	case lo > hi:
		r.fail("PET_NNODES", v, "minimum above maximum")
	default:
		r.d.NNodes, r.d.MinNodes = hi, lo
		r.d.From["NNodes"] = "PET_NNODES"
		r.d.From["MinNodes"] = "PET_NNODES"
	}
}

func (r *reader) indexedJob() {
	r.platform(KubernetesIndexedJob, "JOB_COMPLETION_INDEX")
	r.rank("JOB_COMPLETION_INDEX")
	r.count(&r.d.NNodes, "NNodes", "MUSTER_NNODES")
	if r.err == nil && r.d.NodeRank >= 0 && r.src.Hostname != nil {
		if host, ok := indexZeroHost(r.src.Hostname, r.src.Hosts, r.d.NodeRank); ok {
			r.d.RdzvHost = host
			r.d.From["RdzvHost"] = "hostname and /etc/hosts"
		}
	}
}

// indexZeroHost derives the name of index 0's pod from this pod's: pods of
// an indexed Job are named JOB-INDEX, and with a headless Service as their
// subdomain Kubernetes writes JOB-INDEX.SUBDOMAIN.NAMESPACE.svc.DOMAIN into
// /etc/hosts. Without that domain the name would not resolve: ok is false.
func indexZeroHost(hostname func() (string, error), hosts string, index int) (string, bool) {
	name, err := hostname()
	if err != nil {
		return "", false
	}
	// The host name is the FQDN itself when the pod sets setHostnameAsFQDN.
	short, domain, _ := strings.Cut(name, ".")
	job, ok := strings.CutSuffix(short, "-"+strconv.Itoa(index))
	if !ok || job == "" {
		return "", false
	}
	if domain == "" {
		domain = hostsDomain(hosts, short)
	}
	if domain == "" {
		return "", false
	}
	host := job + "-0." + domain
	return host, validHost(host)
}

// hostsDomain finds short's FQDN in an /etc/hosts file and returns what
// follows its first label, "" when none is there.
func hostsDomain(hosts, short string) string {
	lines := bufio.NewScanner(strings.NewReader(hosts))
	for lines.Scan() {
		line, _, _ := strings.Cut(lines.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		for _, name := range f[1:] {
			if domain, ok := strings.CutPrefix(name, short+"."); ok && domain != "" {
				return domain
			}
		}
	}
	return ""
}

func (r *reader) platform(name, key string) {
	r.d.Platform = name
	r.d.From["Platform"] = key
}

// get returns a variable's value, with ok false when it is unset, empty, or
// an earlier error stops the reading.
func (r *reader) get(name string) (string, bool) {
	if r.err != nil {
		return "", false
	}
	v := r.getenv(name)
	if v == "" {
		return "", false
	}
	if len(v) > MaxValueLen {
		r.err = fmt.Errorf("%s: value longer than %d bytes (starts %.20q)", name, MaxValueLen, v)
		return "", false
	}
	return v, true
}

func (r *reader) fail(name, value, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s=%q: %s", name, value, why)
	}
}

func (r *reader) count(dst *int, field, name string) { r.countFrom(1, dst, field, name) }

// gpus reads a GPU count: 0 is a CPU-only step (SLURM_GPUS_ON_NODE=0).
func (r *reader) gpus(dst *int, field, name string) { r.countFrom(0, dst, field, name) }

func (r *reader) countFrom(least int, dst *int, field, name string) {
	if v, ok := r.get(name); ok {
		n, err := parseCount(v, least)
		if err != nil {
			r.fail(name, v, err.Error())
			return
		}
		*dst = n
		r.d.From[field] = name
	}
}

func (r *reader) rank(name string) {
	if v, ok := r.get(name); ok {
		n, err := parseWhole(v)
		if err == nil && n > MaxCount-1 {
			err = fmt.Errorf("out of range 0..%d", MaxCount-1)
		}
		if err != nil {
			r.fail(name, v, err.Error())
			return
		}
		r.d.NodeRank = n
		r.d.From["NodeRank"] = name
	}
}

// checkRank runs once all fields are read, so that the rank can be held
// against the node count whichever variable gave it.
func (r *reader) checkRank() {
	d := r.d
	if d.NodeRank >= 0 && d.NNodes > 0 && d.NodeRank >= d.NNodes {
		rn, nn := d.From["NodeRank"], d.From["NNodes"]
		r.err = fmt.Errorf("%s=%q: rank not below the node count %s=%q", rn, r.getenv(rn), nn, r.getenv(nn))
	}
}

func (r *reader) port(dst *int, field, name string) {
	if v, ok := r.get(name); ok {
		n, err := parseWhole(v)
		if err == nil && (n < 1 || n > 65535) {
			err = fmt.Errorf("port out of range 1..65535")
		}
		if err != nil {
			r.fail(name, v, err.Error())
			return
		}
		*dst = n
		r.d.From[field] = name
	}
}

// host accepts one host name or address, checked by the hostfile package's
// rules: a hostlist that expands to exactly itself.
func (r *reader) host(dst *string, field, name string) {
	if v, ok := r.get(name); ok {
		if !validHost(v) {
			r.fail(name, v, "not a host name or address")
			return
		}
		*dst = v
		r.d.From[field] = name
	}
}

func validHost(v string) bool {
	hosts, err := hostfile.Expand(v)
	return err == nil && len(v) <= MaxValueLen && len(hosts) == 1 && hosts[0] == v
}

func (r *reader) addr(dst *string, field, name string) {
	if v, ok := r.get(name); ok {
		if _, err := netip.ParseAddr(v); err != nil {
			r.fail(name, v, "not an IP address")
			return
		}
		*dst = v
		r.d.From[field] = name
	}
}

// parseWhole accepts only decimal digits: no sign, no spaces, no base prefix.
func parseWhole(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("not a whole number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a whole number")
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("number too large")
	}
	return n, nil
}

func parseCount(s string, least int) (int, error) {
	n, err := parseWhole(s)
	if err == nil && (n < least || n > MaxCount) {
		err = fmt.Errorf("out of range %d..%d", least, MaxCount)
	}
	return n, err
}

// Describe returns one line per fact, for a person reading `launcher doctor`.
func (d Detected) Describe() []string {
	if d.Platform == "" {
		return []string{"nothing detected: no platform variables set"}
	}
	from := func(field string) string { return "(from " + d.From[field] + ")" }
	lines := []string{fmt.Sprintf("platform: %s (%s)", d.Platform, d.From["Platform"])}
	if d.NodeRank >= 0 {
		lines = append(lines, fmt.Sprintf("node rank: %d %s", d.NodeRank, from("NodeRank")))
	}
	if d.RdzvHost != "" {
		src := from("RdzvHost")
		switch d.From["RdzvHost"] {
		case "SLURM_JOB_NODELIST":
			src = "(first host of SLURM_JOB_NODELIST)"
		case "hostname and /etc/hosts":
			src = "(index 0's pod, named from this pod's hostname and /etc/hosts)"
		}
		lines = append(lines, fmt.Sprintf("rendezvous host: %s %s", d.RdzvHost, src))
	}
	if d.RdzvPort != 0 {
		lines = append(lines, fmt.Sprintf("rendezvous port: %d %s", d.RdzvPort, from("RdzvPort")))
	}
	if d.NNodes != 0 {
		lines = append(lines, fmt.Sprintf("nodes: %d %s", d.NNodes, from("NNodes")))
	}
	if d.MinNodes != 0 {
		lines = append(lines, fmt.Sprintf("minimum nodes (elastic): %d %s", d.MinNodes, from("MinNodes")))
	}
	if d.GPUsPerNode != 0 {
		lines = append(lines, fmt.Sprintf("GPUs per node: %d %s", d.GPUsPerNode, from("GPUsPerNode")))
	}
	if len(d.NodeAddrs) > 0 {
		lines = append(lines, fmt.Sprintf("node addresses: %s %s", strings.Join(d.NodeAddrs, " "), from("NodeAddrs")))
	}
	return lines
}

// NodeHosts names node ranks 0..n-1, in order, when the platform names its
// nodes: dstack's DSTACK_NODES_IPS, or an indexed Job's pods, JOB-INDEX
// under the subdomain that index 0's name (RdzvHost, from this pod's host
// name and /etc/hosts) has. from says where the names came from; ok is
// false when the platform names no nodes, or fewer than n.
func (d Detected) NodeHosts(n int) (hosts []string, from string, ok bool) {
	switch {
	case n < 1:
		return nil, "", false
	case len(d.NodeAddrs) > 0:
		if len(d.NodeAddrs) < n {
			return nil, "", false
		}
		return append([]string(nil), d.NodeAddrs[:n]...), d.From["NodeAddrs"], true
	case d.Platform == KubernetesIndexedJob && d.From["RdzvHost"] == "hostname and /etc/hosts":
		if d.NNodes > 0 && d.NNodes < n {
			return nil, "", false
		}
		for i := range n {
			h, ok := IndexedHost(d.RdzvHost, i)
			if !ok {
				return nil, "", false
			}
			hosts = append(hosts, h)
		}
		return hosts, "index 0's pod name, from this pod's hostname and /etc/hosts", true
	}
	return nil, "", false
}

// IndexedHost is the name of an indexed Job's pod of index i, from index
// 0's: JOB-0.DOMAIN gives JOB-i.DOMAIN.
func IndexedHost(zero string, i int) (string, bool) {
	short, domain, _ := strings.Cut(zero, ".")
	job, ok := strings.CutSuffix(short, "-0")
	if !ok || job == "" || domain == "" || i < 0 {
		return "", false
	}
	host := job + "-" + strconv.Itoa(i) + "." + domain
	return host, validHost(host)
}
