package entrypoint

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/launch"
	"github.com/musterhq/muster/ncclprobe"
	"github.com/musterhq/muster/node"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// JobName names the job agent run submits: the nodes that join find it by
// this name in their store.
const JobName = "agent-run"

// Run decides this node's role, runs its part of the job, and returns the
// job's exit code. A signal while the node still waits (for the
// rendezvous host's name or its store) ends it with 128+signal.
func Run(ctx context.Context, p *Plan) (int, error) {
	if p.Logger == nil {
		p.Logger = zap.NewNop()
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	early := make(chan os.Signal, 1)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for {
			select {
			case sig := <-p.Signals:
				if slices.Contains(p.Forward, sig.(syscall.Signal)) {
					fmt.Fprintf(p.Stderr, "muster: %s while waiting: no workers to send it to yet\n", sig)
					continue
				}
				early <- sig
				stopWaiting()
			case <-waitCtx.Done():
			}
			return
		}
	}()
	dir, err := os.MkdirTemp("", "muster-run-")
	if err != nil {
		stopWaiting()
		<-watching
		return 1, err
	}
	defer os.RemoveAll(dir)
	role, err := DecideRole(waitCtx, p, LocalAddrs, p.Stderr)
	var peers []string
	var join string
	switch {
	case err != nil:
	case p.Replicated():
		peers, join, err = waitForReplicas(waitCtx, p, dir)
	case !role.Host:
		err = waitForHost(waitCtx, p, p.Stderr)
	}
	stopWaiting()
	<-watching
	select {
	case sig := <-early:
		fmt.Fprintf(p.Stderr, "muster: %s while waiting: stopping\n", sig)
		return 128 + int(sig.(syscall.Signal)), nil
	default:
	}
	if err != nil {
		return 1, err
	}
	if p.Replicated() {
		return runReplicated(ctx, p, peers, join, dir)
	}
	if role.Host {
		return runHost(ctx, p, role, dir)
	}
	return runJoiner(ctx, p, dir)
}

func (p *Plan) agentConfig(addr string, rank int) agent.Config {
	if p.Addr != "" {
		addr = p.Addr
	}
	// A node whose store is gone must not wait long to deliver its last
	// events: the container's stop grace is short.
	return agent.Config{Name: p.Name, Addr: addr, Rank: int32(rank), Environ: p.Environ, GPUs: p.GPUDevices, GPUError: p.GPUError,
		Fabric: p.Fabric, ShutdownTimeout: shutdownTimeout, NCCLVersion: ncclprobe.Self()}
}

// hostCerts makes the store certificate of a node that hosts the store (or
// a replica of it), from the cluster token's CA: valid for loopback, this
// node's addresses and host, the name the others reach it by ("" for none).
func hostCerts(dir, token, host string) (security.Security, error) {
	hosts := []string{"localhost", "127.0.0.1"}
	if host != "" {
		hosts = append(hosts, host)
	}
	if ips, err := LocalAddrs(); err == nil {
		for _, ip := range ips {
			hosts = append(hosts, ip.String())
		}
	}
	files, err := security.GenerateTokenCerts(dir, token, hosts)
	if err != nil {
		return security.Security{}, err
	}
	return security.Security{Token: token, CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA}, nil
}

// runHost hosts the store and gossip's seed, submits the job and follows
// it, printing every rank's output, as the launcher does.
func runHost(ctx context.Context, p *Plan, role Role, dir string) (int, error) {
	sec, err := hostCerts(dir, p.Token, p.RdzvHost)
	if err != nil {
		return 1, err
	}
	rank := max(p.NodeRank, 0)
	n, err := node.Start(ctx, node.Config{Logger: p.Logger, Listen: net.JoinHostPort("", strconv.Itoa(p.RdzvPort)),
		Gossip: &node.Gossip{NodeTimeout: p.NodeTimeout}, Security: sec, Agent: p.agentConfig(role.Addr, rank), MetricsAddr: p.MetricsAddr,
		GPUsExpected: p.GPUsExpected})
	if err != nil {
		return 1, err
	}
	defer n.Close(p.KillTimeout)
	c, err := storeclient.Dial(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.RdzvPort)), security.Security{Token: p.Token, CAFile: sec.CAFile})
	if err != nil {
		return 1, err
	}
	defer c.Close()
	spec, err := p.jobSpec()
	if err != nil {
		return 1, err
	}
	// The store failing ends the job here: the other nodes can no longer
	// reach it, and the deferred Close stops this node's workers.
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
	code, err := launch.Run(jctx, p.Logger, c, launch.Options{Spec: spec, Stdout: p.Stdout, Stderr: p.Stderr, TagOutput: true,
		OutputRanks: p.OutputRanks, TimestampOutput: p.TimestampOutput, Signals: p.Signals, Forward: p.Forward, CoalesceSignals: coalesceSignals,
		ReportBindings: p.ReportBindings, Store: "the rendezvous on " + p.Endpoint(), WaitFlag: "--join-timeout"})
	select {
	case ferr := <-failed:
		return 1, ferr
	default:
	}
	return code, err
}

// jobSpec is the job agent run submits.
func (p *Plan) jobSpec() (*musterv1.JobSpec, error) {
	workdir, err := launch.Workdir()
	if err != nil {
		return nil, err
	}
	job := launch.Job{Name: JobName, Argv: p.Argv,
		Nnodes: int32(p.NNodes), MinNodes: int32(p.MinNodes), GPUs: int32(p.GPUs), NProc: int32(p.NProc),
		KillTimeout: p.KillTimeout, WaitTimeout: p.JoinTimeout, LastCall: p.LastCall, MaxRestarts: int32(p.MaxRestarts),
		Workdir: workdir, MPI: p.MPI, CPUBind: p.CPUBind, NoAgentStore: p.NoAgentStore, MemoryLimit: p.MemoryLimit,
		HangTimeout: p.HangTimeout, HangFirstTimeout: p.HangFirstTimeout, HangOnSilence: p.HangOnSilence,
		Policy: p.Policy}
	return job.Spec(), nil
}

// runJoiner waits for the rendezvous host, joins its store and gossip, and
// waits for the job to end. A signal stops this node's workers, which
// stops the job (or, with restarts left, its round) everywhere.
func runJoiner(ctx context.Context, p *Plan, dir string) (int, error) {
	ca := filepath.Join(dir, "ca.pem")
	if err := security.WriteTokenCA(ca, p.Token); err != nil {
		return 1, err
	}
	sec := security.Security{Token: p.Token, CAFile: ca}
	n, err := node.Start(ctx, node.Config{Logger: p.Logger, Join: p.Endpoint(), Security: sec,
		Gossip: &node.Gossip{Join: []string{p.RdzvHost}, NodeTimeout: p.NodeTimeout}, Agent: p.agentConfig("", p.NodeRank),
		MetricsAddr: p.MetricsAddr, GPUsExpected: p.GPUsExpected})
	if err != nil && strings.Contains(err.Error(), "certificate signed by unknown authority") {
		return 1, fmt.Errorf("the rendezvous host %s holds another cluster token than this node: give every node the same MUSTER_TOKEN", p.Endpoint())
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
	fmt.Fprintf(p.Stderr, "muster: node %s joined the rendezvous at %s\n", p.Name, p.Endpoint())
	c, err := storeclient.Dial(p.Endpoint(), sec)
	if err != nil {
		return 1, err
	}
	defer c.Close()
	return followJob(ctx, p, n, c, false, func() { closed = true })
}

// followJob follows the job from a node that does not print its output, to
// its end. Without replicas the store's host is the job's: its death stops
// this node's workers at once. With them (replicated), the store's leader
// is followed wherever it goes, and a lost node is the job's to restart.
// closing says the node is closed here.
func followJob(ctx context.Context, p *Plan, n *node.Node, c *storeclient.Client, replicated bool, closing func()) (int, error) {
	ends := make(chan jobEnd, 1)
	goesOn := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hostClosed := make(chan struct{}, 1)
	go func() { ends <- followEnd(wctx, p, c, goesOn, hostClosed) }()
	hostLost := make(chan string, 1)
	var storeClosed <-chan struct{}
	if !replicated {
		// A replica's connection closing is a leader to follow instead.
		storeClosed = hostClosed
		go watchHost(wctx, n, hostLost)
	}
	for {
		select {
		case end := <-ends:
			return end.code, end.err
		case err := <-n.Err():
			// Only a node hosting a replica gets this: its store failed.
			closing()
			n.Close(p.KillTimeout)
			return 1, err
		case name := <-hostLost:
			// The job is gone with its store: nothing left is worth a grace.
			closing()
			n.Agent().StoreGone()
			n.Close(0)
			return 1, fmt.Errorf("the rendezvous host %s (node %s) died: gossip lost it; this node's workers were stopped, and the job's end is not known here", p.Endpoint(), name)
		case <-storeClosed:
			name, left := storeHost(n)
			if left {
				continue // it went away cleanly: its job's end may yet be known
			}
			closing()
			n.Agent().StoreGone()
			n.Close(0)
			return 1, fmt.Errorf("the rendezvous host %s (node %s) died: its connection closed; this node's workers were stopped, and the job's end is not known here", p.Endpoint(), name)
		case <-goesOn:
		case sig := <-p.Signals:
			if slices.Contains(p.Forward, sig.(syscall.Signal)) {
				forward(ctx, p, c, sig.(syscall.Signal))
				continue
			}
			fmt.Fprintf(p.Stderr, "muster: %s: stopping this node's workers (--kill-timeout %s)\n", sig, p.KillTimeout)
			closing()
			n.Close(p.KillTimeout)
			code := 128 + int(sig.(syscall.Signal))
			// The job's end gives its code; a job that goes on without this
			// node (a restart) lets it go at once.
			select {
			case end := <-ends:
				if end.err == nil {
					code = end.code
				}
			case <-goesOn:
			case <-time.After(p.KillTimeout + stopWait):
			}
			return code, nil
		}
	}
}

// coalesceSignals is how close together the forwarded signals of an agent
// run job's nodes are one delivery: a platform signals every node at once.
const coalesceSignals = time.Second

// forward sends sig on to every worker of the job, from a node that joined
// it: the same signal from the other nodes within coalesceSignals is the
// same delivery.
func forward(ctx context.Context, p *Plan, c *storeclient.Client, sig syscall.Signal) {
	name := unix.SignalName(sig)
	id := findJob(ctx, c)
	if id == "" {
		fmt.Fprintf(p.Stderr, "muster: %s: no job to send it to yet\n", name)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.Signal(cctx, &musterv1.SignalRequest{JobId: id, Signal: int32(sig), CoalesceMs: coalesceSignals.Milliseconds()})
	switch {
	case err != nil:
		fmt.Fprintf(p.Stderr, "muster: %s not sent to job %s's workers: %s\n", name, id, storeclient.ErrorMessage(err))
	case res.GetCoalesced():
		fmt.Fprintf(p.Stderr, "muster: %s: already sent to job %s's workers (another node forwarded it within %s)\n", name, id, coalesceSignals)
	default:
		fmt.Fprintf(p.Stderr, "muster: %s: sent to job %s's workers (%s)\n", name, id, launch.Nodes(int(res.GetNodes())))
	}
}

// shutdownTimeout bounds how long a closing node waits for its workers'
// last events to reach the store, past their kill timeout.
const shutdownTimeout = 3 * time.Second

// stopWait is how long past its kill timeout a stopped node waits to learn
// the job's code: the other nodes' workers stop within theirs.
const stopWait = 2 * time.Second

type jobEnd struct {
	code int
	err  error
}

// followEnd finds the job in the store and follows it, without its output,
// to its end: a late node of an elastic job may never run a worker of it.
// Each restart of the job is signalled on restarted, and a connection to
// the store that closed on hostClosed (hostclosed.go). A lost store is
// followed again for a while: it may come back.
func followEnd(ctx context.Context, p *Plan, c *storeclient.Client, restarted, hostClosed chan<- struct{}) jobEnd {
	var id string
	lost := time.Time{}
	var from uint64
	for {
		if id == "" {
			id = findJob(ctx, c)
		}
		if id != "" {
			fin, next, err := watch(ctx, p, c, id, from, restarted)
			if p.Replicated() && next != from {
				lost = time.Time{} // the stream went on: a lost leader was followed
			}
			from = next
			if fin != nil {
				fmt.Fprintf(p.Stderr, "muster: job %s %s, exit code %d%s\n", id, describeState(fin.GetState()), fin.GetExitCode(), summary(fin))
				return jobEnd{code: int(fin.GetExitCode())}
			}
			if err != nil && lost.IsZero() {
				lost = time.Now()
			}
			if connectionClosed(err) {
				signal(hostClosed)
			}
			// To the leader a replica named, or the next replica.
			c.FollowLeader(err)
		}
		if ctx.Err() != nil {
			return jobEnd{code: 1, err: ctx.Err()}
		}
		if p.Replicated() && !lost.IsZero() && time.Since(lost) > replicaLostWait {
			return jobEnd{code: 1, err: fmt.Errorf("lost the store replicas %s for %s: the job's end is not known here", strings.Join(p.Peers, ","), replicaLostWait)}
		}
		if !p.Replicated() && !lost.IsZero() && time.Since(lost) > hostLostWait {
			return jobEnd{code: 1, err: fmt.Errorf("lost the rendezvous host %s for %s: the job's end is not known here", p.Endpoint(), hostLostWait)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchHost sends the store host's name on lost once gossip declares it
// dead: following its store would only wait for it in vain.
func watchHost(ctx context.Context, n *node.Node, lost chan<- string) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, m := range n.Gossip().Members() {
			if m.Meta.Store && m.State == cluster.Dead {
				lost <- m.Name
				return
			}
		}
	}
}

// hostLostWait is how long a node follows a store that went away.
const hostLostWait = 15 * time.Second

// findJob returns the ID of the job agent run submitted, "" while there is none.
func findJob(ctx context.Context, c *storeclient.Client) string {
	res, err := c.ListJobs(ctx, &musterv1.ListJobsRequest{})
	if err != nil {
		return ""
	}
	for _, j := range res.GetJobs() {
		if j.GetSpec().GetName() == JobName {
			return j.GetJobId()
		}
	}
	return ""
}

// watch follows job id from version from; it returns the job's end, or
// where to follow on from after the stream broke.
func watch(ctx context.Context, p *Plan, c *storeclient.Client, id string, from uint64, restarted chan<- struct{}) (*musterv1.JobFinished, uint64, error) {
	stream, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: id, FromVersion: from, SkipOutput: true})
	if err != nil {
		return nil, from, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return nil, from, err
		}
		from = ev.GetVersion() + 1
		switch e := ev.GetEvent().(type) {
		case *musterv1.JobEvent_Restarting:
			fmt.Fprintln(p.Stderr, "muster: "+launch.DescribeRestart(e.Restarting))
			select {
			case restarted <- struct{}{}:
			default:
			}
		case *musterv1.JobEvent_Finished:
			return e.Finished, from, nil
		}
	}
}

func describeState(st musterv1.JobState) string {
	switch st {
	case musterv1.JobState_JOB_STATE_SUCCEEDED:
		return "succeeded"
	case musterv1.JobState_JOB_STATE_CANCELLED:
		return "was stopped"
	}
	return "failed"
}

func summary(fin *musterv1.JobFinished) string {
	if s := fin.GetSummary(); s != "" {
		return ": " + s
	}
	return ""
}
