package entrypoint

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/jobhistory"
	"github.com/musterhq/muster/launch"
	"github.com/musterhq/muster/node"
	"github.com/musterhq/muster/platform"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// With --store-replicas N (3 or 5), node ranks 0..N-1 each host a replica
// of the store (raft, package replica) and each submits the job under the
// same submission name, so that the store holds it once whoever submits
// first, and each follows it: the job never depends on one launcher, and
// the store stops it only when none of them follows it any more. Node rank
// 0 prints every rank's output, as without replicas; the other replica
// nodes and the other nodes say only how the job goes and ends. The death
// of any node, node rank 0's too, is a lost node: with --nnodes MIN:MAX and
// --max-restarts the job's round restarts on the rest, which go on
// following the replicas' leader.

// replicaSubmission names the submission every replica node makes: one job.
const replicaSubmission = "agent-run/" + JobName

// replicaReattach is how long a replica node follows a store that lost its
// leader, and replicaLostWait how long any node waits for a new one: raft
// elects one within seconds.
const (
	replicaReattach = 30 * time.Second
	replicaLostWait = 30 * time.Second
)

// resolvePeers fills p.Peers for --store-replicas, from --store-peers or
// the platform's names of the first nodes, and checks what replicas need.
func (p *Plan) resolvePeers(det platform.Detected) error {
	n := p.StoreReplicas
	if n == 0 && len(p.StorePeers) > 0 {
		n = len(p.StorePeers)
	}
	switch {
	case n <= 1 && len(p.StorePeers) > 1:
		return fmt.Errorf("--store-peers lists %d replicas, but --store-replicas is %d: give --store-replicas %d", len(p.StorePeers), n, len(p.StorePeers))
	case n <= 1:
		return nil
	case n != 3 && n != 5:
		return fmt.Errorf("--store-replicas %d: want 0 or 1 (one store, on node rank 0), 3 or 5 (replicas on node ranks 0..N-1: a majority of them must live)", n)
	case n > p.NNodes:
		return fmt.Errorf("--store-replicas %d: more replicas than the job's %d nodes (--nnodes)", n, p.NNodes)
	case len(p.StorePeers) > 0 && len(p.StorePeers) != n:
		return fmt.Errorf("--store-peers lists %d replicas, --store-replicas wants %d: give node ranks 0..%d's addresses, node rank 0's first", len(p.StorePeers), n, n-1)
	case p.NodeRank < 0:
		return fmt.Errorf("--store-replicas %d: node ranks 0..%d host the store's replicas, and this node's rank is not known: give --node-rank (or MUSTER_AGENT_NODE_RANK), each node its own", n, n-1)
	}
	hosts, from := p.StorePeers, "--store-peers"
	if len(hosts) == 0 {
		var ok bool
		if hosts, from, ok = det.NodeHosts(n); !ok {
			return fmt.Errorf("--store-replicas %d: node ranks 0..%d host the store's replicas, and every node must know where: "+
				"give --store-peers HOST[:PORT],... (or MUSTER_STORE_PEERS), node rank 0's address first, the same on every node; "+
				"the platform names them by itself only for dstack (DSTACK_NODES_IPS) and for an indexed Job whose pods have a headless Service as subdomain", n, n-1)
		}
	}
	for _, h := range hosts {
		host, port, err := splitRdzv(h)
		if err != nil {
			return fmt.Errorf("--store-peers: %s", strings.TrimPrefix(err.Error(), "--rdzv "))
		}
		if !strings.Contains(h, "]:") && strings.Count(h, ":") != 1 {
			port = p.RdzvPort // no port given: the rendezvous port
		}
		peer := net.JoinHostPort(host, strconv.Itoa(port))
		if slices.Contains(p.Peers, peer) {
			return fmt.Errorf("--store-peers: %s is listed twice", peer)
		}
		p.Peers = append(p.Peers, peer)
	}
	p.From["StorePeers"] = from
	if p.RdzvHost == "" && !p.Host {
		host, port, _ := net.SplitHostPort(p.Peers[0])
		p.RdzvHost, p.From["RdzvHost"] = host, from
		p.RdzvPort, _ = strconv.Atoi(port)
		p.From["RdzvPort"] = from
	}
	return nil
}

// resolveReplicas turns the replicas' addresses into IP:PORT, waiting for
// names that do not resolve yet (a pod's name comes with the pod): every
// replica must name each the same way, as its store listens.
func resolveReplicas(ctx context.Context, p *Plan, stderr io.Writer) ([]string, error) {
	out := make([]string, len(p.Peers))
	for i, peer := range p.Peers {
		host, port, _ := net.SplitHostPort(peer)
		var ips []netip.Addr
		err := waitFor(ctx, p, stderr, fmt.Sprintf("node rank %d's name %s to resolve", i, host), func(ctx context.Context) error {
			var err error
			ips, err = lookup(ctx, host)
			return err
		})
		if err != nil {
			return nil, err
		}
		ip := ips[0]
		for _, a := range ips {
			if a.Is4() {
				ip = a
				break
			}
		}
		out[i] = net.JoinHostPort(ip.String(), port)
	}
	return out, nil
}

// waitForReplicas resolves the replicas' addresses and waits for them: a
// replica node until a majority of their nodes are up, another node until
// they have a leader, which join names.
func waitForReplicas(ctx context.Context, p *Plan, dir string) (peers []string, join string, err error) {
	if peers, err = resolveReplicas(ctx, p, p.Stderr); err != nil {
		return nil, "", err
	}
	if p.NodeRank < len(peers) {
		return peers, "", waitForQuorum(ctx, p, peers, p.NodeRank, p.Stderr)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := security.WriteTokenCA(ca, p.Token); err != nil {
		return nil, "", err
	}
	join, err = waitForLeader(ctx, p, peers, security.Security{Token: p.Token, CAFile: ca}, p.Stderr)
	return peers, join, err
}

// waitForQuorum holds a replica node back until a majority of the replicas'
// nodes are up, its own among them: a replica's agent gives the election
// only seconds. Meanwhile the node answers on its store's port, so that the
// others see it is up; it stops answering just before its store starts there.
func waitForQuorum(ctx context.Context, p *Plan, peers []string, rank int, stderr io.Writer) error {
	lis, err := net.Listen("tcp", peers[rank])
	if err != nil {
		return fmt.Errorf("store replica: listen on %s: %w", peers[rank], err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	need := len(peers)/2 + 1
	return waitFor(ctx, p, stderr, fmt.Sprintf("%d of the %d store replicas' nodes", need, len(peers)), func(ctx context.Context) error {
		up, down := 1, []string{}
		for i, peer := range peers {
			if i == rank {
				continue
			}
			c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", peer)
			if err != nil {
				down = append(down, fmt.Sprintf("node rank %d at %s", i, peer))
				continue
			}
			c.Close()
			up++
		}
		if up >= need {
			return nil
		}
		return fmt.Errorf("%d up; not yet %s", up, strings.Join(down, ", "))
	})
}

// waitForLeader waits until the replicas have a leader that answers, and
// returns the replica that answered first.
func waitForLeader(ctx context.Context, p *Plan, peers []string, sec security.Security, stderr io.Writer) (string, error) {
	c, err := storeclient.DialCluster(peers[0], peers, sec)
	if err != nil {
		return "", err
	}
	defer c.Close()
	err = waitFor(ctx, p, stderr, "the store replicas' leader at "+strings.Join(peers, ","), func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := c.ListJobs(cctx, &musterv1.ListJobsRequest{})
		return err
	})
	return c.StoreAddr(), err
}

// runReplicated runs a node of a job whose store is replicated: node ranks
// 0..N-1 host its replicas, submit the job and follow it; the others join.
func runReplicated(ctx context.Context, p *Plan, peers []string, join, dir string) (int, error) {
	rank := p.NodeRank
	ca := filepath.Join(dir, "ca.pem")
	if err := security.WriteTokenCA(ca, p.Token); err != nil {
		return 1, err
	}
	client := security.Security{Token: p.Token, CAFile: ca}
	var gossipJoin []string
	for i, peer := range peers {
		if i != rank {
			host, _, _ := net.SplitHostPort(peer)
			gossipJoin = append(gossipJoin, host)
		}
	}
	cfg := node.Config{Logger: p.Logger, Gossip: &node.Gossip{Join: gossipJoin, NodeTimeout: p.NodeTimeout},
		MetricsAddr: p.MetricsAddr, GPUsExpected: p.GPUsExpected}
	replica := rank < len(peers)
	home := peers[0]
	if replica {
		home = peers[rank]
		host, _, _ := net.SplitHostPort(home)
		sec, err := hostCerts(dir, p.Token, host)
		if err != nil {
			return 1, err
		}
		cfg.Security = sec
		cfg.Listen, cfg.StorePeers = home, peers
		cfg.History = jobhistory.Config{Dir: filepath.Join(dir, "store")}
		cfg.Agent = p.agentConfig(host, rank)
	} else {
		cfg.Security = client
		cfg.Join, cfg.JoinReplicas = cmp.Or(join, peers[0]), peers
		cfg.Agent = p.agentConfig("", rank)
	}
	n, err := node.Start(ctx, cfg)
	if err != nil && strings.Contains(err.Error(), "certificate signed by unknown authority") {
		return 1, fmt.Errorf("the store replicas %s hold another cluster token than this node: give every node the same MUSTER_TOKEN", strings.Join(peers, ","))
	}
	if err != nil {
		return 1, err
	}
	closed := false
	defer func() {
		if !closed {
			n.Close(p.KillTimeout)
		}
	}()
	c, err := storeclient.DialCluster(home, peers, client)
	if err != nil {
		return 1, err
	}
	defer c.Close()
	if !replica {
		fmt.Fprintf(p.Stderr, "muster: node %s joined the store replicas %s\n", p.Name, strings.Join(peers, ","))
		return followJob(ctx, p, n, c, true, func() { closed = true })
	}
	spec, err := p.jobSpec()
	if err != nil {
		return 1, err
	}
	id, err := submitReplicated(ctx, p, c, spec)
	if err != nil {
		return 1, err
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := launch.Options{Spec: spec, Stdout: p.Stdout, Stderr: p.Stderr, TagOutput: true,
		OutputRanks: p.OutputRanks, TimestampOutput: p.TimestampOutput, Forward: p.Forward, CoalesceSignals: coalesceSignals,
		ReportBindings: p.ReportBindings, Store: "the store replicas " + strings.Join(peers, ","), WaitFlag: "--join-timeout",
		Reattach: replicaReattach}
	if rank == 0 {
		// Node rank 0 is the job's launcher, as without replicas: it prints
		// the output, and its signals stop the job.
		failed := make(chan error, 1)
		go func() {
			select {
			case err := <-n.Err():
				// nil: Err closed, the node over, which is no failure.
				if err != nil {
					failed <- err
					cancel()
				}
			case <-jctx.Done():
			}
		}()
		opts.Signals = p.Signals
		code, err := launch.Attach(jctx, p.Logger, c, id, 1, opts)
		select {
		case ferr := <-failed:
			return 1, ferr
		default:
		}
		return code, err
	}
	// The other replica nodes follow the job too, quietly, so that it
	// outlives node rank 0; they end as a joining node does.
	opts.Stdout, opts.Stderr = io.Discard, io.Discard
	opts.OutputRanks = func(int32) bool { return false }
	opts.ReportBindings = false
	go launch.Attach(jctx, p.Logger, c, id, 1, opts)
	return followJob(ctx, p, n, c, true, func() { closed = true })
}

// submitReplicated submits the job under the submission name every replica
// node gives, waiting for the replicas to elect a leader, and returns its ID.
func submitReplicated(ctx context.Context, p *Plan, c *storeclient.Client, spec *musterv1.JobSpec) (string, error) {
	var sub *musterv1.SubmitResponse
	var refused error
	err := waitFor(ctx, p, p.Stderr, "the store replicas to take the job", func(ctx context.Context) error {
		var err error
		sub, err = c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec, Submission: replicaSubmission})
		if _, electing := storeclient.LeaderOf(err); err != nil && !electing &&
			status.Code(err) != codes.Unavailable && status.Code(err) != codes.Aborted {
			refused = err
			return nil
		}
		return err
	})
	switch {
	case refused != nil:
		return "", fmt.Errorf("submit: %s", storeclient.ErrorMessage(refused))
	case err != nil:
		return "", err
	}
	c.LearnReplicas(sub.GetStoreReplicas())
	return sub.GetJobId(), nil
}
