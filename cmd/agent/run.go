package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/entrypoint"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/launch"
	"github.com/musterhq/muster/logging"
	"github.com/musterhq/muster/platform"
	"github.com/musterhq/muster/security"
)

// runFlags are agent run's values that need parsing beyond a string.
type runFlags struct {
	gpus, nproc, nodeRank, maxRestarts *cmdline.Count
	joinTimeout, lastCall, killTimeout *cmdline.Duration
	nodeTimeout                        *cmdline.Duration
	noRestartCodes                     *cmdline.ExitCodes
	backoff, backoffMax, healthTimeout *cmdline.Duration
	memoryLimit                        *cmdline.Size
	outputRanks                        *cmdline.Ranks
	hangTimeout, hangFirst             *cmdline.Duration
	forward                            *cmdline.Signals
	storeReplicas                      *cmdline.Count
	cpuBind                            *cmdline.Choice
}

func runCommand() *cli.Command {
	f := runFlags{
		gpus:           cmdline.NewCount(0, 0, jobspec.MaxGPUs),
		nproc:          cmdline.NewCount(0, 0, jobspec.MaxNProc),
		nodeRank:       cmdline.NewCount(-1, -1, jobspec.MaxNodes-1),
		maxRestarts:    cmdline.NewCount(0, 0, jobspec.MaxRestarts),
		joinTimeout:    cmdline.NewDuration(10 * time.Minute),
		lastCall:       cmdline.NewDuration(30 * time.Second),
		noRestartCodes: &cmdline.ExitCodes{},
		backoff:        cmdline.NewDuration(time.Second),
		backoffMax:     cmdline.NewDuration(30 * time.Second),
		healthTimeout:  cmdline.NewDuration(jobspec.DefaultHealthTimeout),
		killTimeout:    cmdline.NewDuration(5 * time.Second),
		nodeTimeout:    cmdline.NewDuration(cluster.DefaultNodeTimeout),
		memoryLimit:    &cmdline.Size{},
		outputRanks:    &cmdline.Ranks{},
		hangTimeout:    cmdline.NewDuration(0),
		hangFirst:      cmdline.NewDuration(0),
		forward:        cmdline.NewSignals(jobspec.DefaultForwardSignals),
		storeReplicas:  cmdline.NewCount(0, 0, 5),
		cpuBind:        cmdline.NewChoice("", launch.ParseCPUBind).ReadsEnv("MUSTER_CPU_BIND"),
	}
	return &cli.Command{
		Name:      "run",
		Usage:     "run one node of a multi-node job: the same line on every node (container entrypoint)",
		ArgsUsage: "-- COMMAND [ARGS...]",
		Description: "Node rank 0, or the node whose address is the --rdzv host, hosts the rendezvous and prints every rank's output; " +
			"the others join it. Every node exits when the job ends, with the job's exit code. Kubernetes indexed Jobs, " +
			"PyTorchJob, dstack and Slurm are detected from their variables; flags win. " +
			"With --store-replicas 3 (or 5), node ranks 0..2 (0..4) each host a replica of the store and each submits the job, " +
			"under one submission name, so the store holds it once, and follows it: the job depends on no single node, and the death " +
			"of any of them, node rank 0's too, is a lost node, which with --nnodes MIN:MAX and --max-restarts restarts the job's round " +
			"on the rest instead of stopping every node. Node rank 0 still prints the output and its signals stop the job; " +
			"the other nodes' signals stop their own workers.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rdzv", Aliases: []string{"rdzv-endpoint", "rdzv_endpoint"}, EnvVars: []string{"MUSTER_RDZV"}, Usage: "the rendezvous `HOST[:PORT]` (port 29400 by default): node rank 0's address, the same on every node"},
			&cli.BoolFlag{Name: "rdzv-host", Usage: "this node hosts the rendezvous, whatever its address"},
			&cli.StringFlag{Name: "nnodes", EnvVars: []string{"MUSTER_NNODES"}, Usage: "the job's nodes: `N`, or MIN:MAX for an elastic job"},
			cmdline.WithEnv(cmdline.Flag(f.gpus, "gpus", nil, "GPUs per node (`G`); default: the platform's count, else none"), "MUSTER_GPUS"),
			cmdline.WithEnv(cmdline.Flag(f.nproc, "nproc", []string{"nproc-per-node", "nproc_per_node"}, "workers per node (`P`); default: one per GPU, else one"), "MUSTER_NPROC"),
			cmdline.WithEnv(cmdline.Flag(f.nodeRank, "node-rank", []string{"node_rank"}, "this node's `RANK`; default: the platform's, else the host of --rdzv is 0 and the rest go by name"), "MUSTER_AGENT_NODE_RANK"),
			cmdline.WithEnv(cmdline.Flag(f.maxRestarts, "max-restarts", []string{"max_restarts"}, "new rounds after a failed worker or a lost node, counted job-wide (`K`)"), "MUSTER_MAX_RESTARTS"),
			&cli.StringFlag{Name: "restart-on", Value: "any", EnvVars: []string{"MUSTER_RESTART_ON"}, Usage: "which failures --max-restarts restarts: `any` (a failed worker or a lost node) or node-loss"},
			cmdline.WithEnv(cmdline.Flag(f.noRestartCodes, "no-restart-exit-codes", nil, "a worker exiting with one of these codes (a comma-separated `LIST`, e.g. 93) fails the job without a restart"), "MUSTER_NO_RESTART_EXIT_CODES"),
			cmdline.WithEnv(cmdline.Flag(f.backoff, "restart-backoff", nil, "wait before the first restart's round (`DURATION`), doubled for each restart after a round that ran under 5 minutes; 0 for none"), "MUSTER_RESTART_BACKOFF"),
			cmdline.WithEnv(cmdline.Flag(f.backoffMax, "restart-backoff-max", nil, "the longest wait between restarts (`DURATION`)"), "MUSTER_RESTART_BACKOFF_MAX"),
			&cli.StringFlag{Name: "health-check", EnvVars: []string{"MUSTER_HEALTH_CHECK"}, Usage: "every node runs `CMD` (with /bin/sh -c) before the workers of every round; a node where it does not exit 0 is left out"},
			cmdline.WithEnv(cmdline.Flag(f.healthTimeout, "health-check-timeout", nil, "how long --health-check may run (`DURATION`)"), "MUSTER_HEALTH_CHECK_TIMEOUT"),
			cmdline.WithEnv(cmdline.Flag(f.joinTimeout, "join-timeout", nil, "how long to wait for the rendezvous host, and the host for the nodes (`DURATION`)"), "MUSTER_JOIN_TIMEOUT"),
			cmdline.WithEnv(cmdline.Flag(f.lastCall, "last-call", nil, "with --nnodes MIN:MAX, how long a round waits for more nodes once MIN are in (`DURATION`)"), "MUSTER_LAST_CALL"),
			cmdline.WithEnv(cmdline.Flag(f.killTimeout, "kill-timeout", nil, "grace between SIGTERM and SIGKILL for the workers (`DURATION`); keep it below the container's stop grace"), "MUSTER_KILL_TIMEOUT"),
			cmdline.WithEnv(cmdline.Flag(f.nodeTimeout, "node-timeout", nil, nodeTimeoutUsage), "MUSTER_NODE_TIMEOUT"),
			cmdline.WithEnv(cmdline.WithDefaultText(cmdline.Flag(f.memoryLimit, "memory-limit", nil, "each worker's memory limit (`SIZE`: 512M, 2G), in a cgroup of its own: past it the kernel's OOM killer kills it, and muster says so"), "none"), "MUSTER_MEMORY_LIMIT"),
			cmdline.Flag(f.outputRanks, "output-ranks", nil, "the host prints only these ranks' output (`LIST`: 0,2-5)"),
			&cli.BoolFlag{Name: "timestamp-output", Usage: "the host prefixes each output line with the time it got it (UTC, RFC 3339 with milliseconds)"},
			cmdline.WithEnv(cmdline.WithDefaultText(cmdline.Flag(f.cpuBind, "cpu-bind", []string{"numa-binding", "numa_binding"}, "bind each worker's CPUs and memory to its own GPUs' (`MODE`): none, numa, socket or cores; also torchrun's node|socket|exclusive"), "none"), "MUSTER_CPU_BIND"),
			&cli.BoolFlag{Name: "report-bindings", EnvVars: []string{"MUSTER_REPORT_BINDINGS"}, Usage: "the host prints each rank's GPUs, NUMA node, CPUs (bound or not) and nearest NIC as it starts"},
			cmdline.WithEnv(cmdline.Flag(f.hangTimeout, "hang-timeout", nil, "a worker that gives no heartbeat (touching $MUSTER_HEARTBEAT_FILE) for `DURATION` is hung: its stacks are dumped and the job stops (0: off)"), "MUSTER_HANG_TIMEOUT"),
			cmdline.WithDefaultText(cmdline.WithEnv(cmdline.Flag(f.hangFirst, "hang-first-timeout", nil, "with --hang-timeout, the timeout before a worker's first heartbeat (`DURATION`)"), "MUSTER_HANG_FIRST_TIMEOUT"), "--hang-timeout"),
			&cli.BoolFlag{Name: "hang-on-silence", EnvVars: []string{"MUSTER_HANG_ON_SILENCE"}, Usage: "with --hang-timeout, every line a worker writes is a heartbeat too"},
			cmdline.WithEnv(cmdline.Flag(f.forward, "forward-signals", nil, "signals sent on to every worker of the job instead of stopping it (`LIST`: USR1,USR2,TERM..., or none)"), "MUSTER_FORWARD_SIGNALS"),
			cmdline.WithEnv(cmdline.Flag(f.storeReplicas, "store-replicas", nil, "`N`: 0 or 1, one store, hosted by node rank 0, which the job cannot outlive; "+
				"3 or 5, node ranks 0..N-1 host its replicas (the nodes' ranks must be known: --node-rank or the platform's), so that the job outlives any one of them"), "MUSTER_STORE_REPLICAS"),
			&cli.StringFlag{Name: "store-peers", EnvVars: []string{"MUSTER_STORE_PEERS"}, Usage: "with --store-replicas, node ranks 0..N-1's `HOST[:PORT],...`, node rank 0's first, the same on every node " +
				"(the port is --rdzv's by default; raft uses the next); default: the platform's names for them (dstack's DSTACK_NODES_IPS, an indexed Job's pods)"},
			&cli.StringFlag{Name: "mpi", EnvVars: []string{"MUSTER_MPI"}, Usage: "the agents serve `MPI`'s process manager interface, so its programs start without mpiexec: mpich (MPICH, Intel MPI), or openmpi (mpirun on node rank 0, the agents its remote shell)"},
			&cli.BoolFlag{Name: "no-agent-store", EnvVars: []string{"MUSTER_NO_AGENT_STORE"}, Usage: "rank 0 hosts PyTorch's TCPStore on MASTER_PORT (by default node rank 0's agent serves it, and workers get TORCHELASTIC_USE_AGENT_STORE=True)"},
			&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "`FILE` holding the cluster token (or set MUSTER_TOKEN); the same on every node"},
			&cli.StringFlag{Name: "name", EnvVars: []string{"MUSTER_NAME"}, Usage: "this node's `NAME` (default: the host name)"},
			&cli.StringFlag{Name: "addr", EnvVars: []string{"MUSTER_ADDR"}, Usage: "this node's `IP` for workers (default: its gossip address)"},
			&cli.StringFlag{Name: "gpu-devices", EnvVars: []string{"MUSTER_GPU_DEVICES"}, Usage: "offer these GPUs (`LIST` of indices) instead of the ones NVML finds"},
			topologyFlag(),
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"MUSTER_METRICS_ADDR"}, Usage: metricsAddrUsage},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what was detected and decided, and exit"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, EnvVars: []string{"MUSTER_VERBOSE"}, Usage: "log what the store and agent do"},
			&cli.StringFlag{Name: "log-format", Value: "auto", EnvVars: []string{"MUSTER_LOG_FORMAT"}, Usage: "`auto` (lines for a person when stderr is a terminal, JSON otherwise), console or json"},
		},
		Action: func(c *cli.Context) error { return run(c, f) },
	}
}

func run(c *cli.Context, f runFlags) error {
	if err := checkMetricsAddr(c); err != nil {
		return err
	}
	nnodes, minNodes, err := parseNNodes(c.String("nnodes"))
	if err != nil {
		return cmdline.Usagef(c, "%s", err)
	}
	if err := cluster.CheckNodeTimeout(f.nodeTimeout.Value()); err != nil {
		return cmdline.Usagef(c, "--node-timeout (MUSTER_NODE_TIMEOUT) %s: want %s to %s", f.nodeTimeout.Value(), cluster.MinNodeTimeout, cluster.MaxNodeTimeout)
	}
	token, _, err := security.ResolveToken(security.TokenSource{File: c.String("token-file")})
	if err != nil {
		return cli.Exit(err.Error(), cmdline.UsageExitCode)
	}
	name := c.String("name")
	if name == "" {
		name, _ = os.Hostname()
	}
	restartOn, err := jobspec.ParseRestartOn(c.String("restart-on"))
	if err != nil {
		return cmdline.Usagef(c, "%s", err)
	}
	policy := launch.Policy{RestartOn: restartOn, NoRestartExitCodes: f.noRestartCodes.Codes(),
		RestartBackoff: f.backoff.Value(), RestartBackoffMax: f.backoffMax.Value(),
		HealthCheck: c.String("health-check"), HealthCheckTimeout: f.healthTimeout.Value()}
	cfg := entrypoint.Config{Policy: policy,
		Rdzv: c.String("rdzv"), Host: c.Bool("rdzv-host"), NNodes: nnodes, MinNodes: minNodes,
		GPUs: int(f.gpus.Int32()), NProc: int(f.nproc.Int32()), NodeRank: int(f.nodeRank.Int32()),
		MaxRestarts: int(f.maxRestarts.Int32()), JoinTimeout: f.joinTimeout.Value(), LastCall: f.lastCall.Value(),
		HangTimeout: f.hangTimeout.Value(), HangFirstTimeout: f.hangFirst.Value(), HangOnSilence: c.Bool("hang-on-silence"),
		Forward:     f.forward.Values(),
		KillTimeout: f.killTimeout.Value(), NodeTimeout: f.nodeTimeout.Value(), Argv: c.Args().Slice(), MPI: c.String("mpi"), NoAgentStore: c.Bool("no-agent-store"),
		MemoryLimit: f.memoryLimit.Bytes(), OutputRanks: f.outputRanks.Contains, TimestampOutput: c.Bool("timestamp-output"), ReportBindings: c.Bool("report-bindings"), CPUBind: f.cpuBind.String(), Token: token, Name: name, Addr: c.String("addr"),
		MetricsAddr: c.String("metrics-addr"), StoreReplicas: int(f.storeReplicas.Int32()),
		Environ: os.Environ(), Stdout: os.Stdout, Stderr: os.Stderr,
	}
	if peers := c.String("store-peers"); peers != "" {
		cfg.StorePeers = strings.Split(peers, ",")
	}
	det, err := platform.DetectFrom(platform.OSSources())
	if err != nil {
		return cli.Exit("platform: "+err.Error(), cmdline.UsageExitCode)
	}
	given := map[string]bool{"nnodes": c.IsSet("nnodes"), "rdzv": c.IsSet("rdzv"), "gpus": f.gpus.IsSet(),
		"nproc": f.nproc.IsSet(), "node-rank": f.nodeRank.IsSet()}
	plan, err := entrypoint.Resolve(cfg, det, func(flag string) bool { return given[flag] })
	if err != nil {
		return cmdline.Usagef(c, "%s", err)
	}
	// What a node of agent run has to say, it prints; the store's and the
	// agent's logs show their errors only, unless asked.
	format, err := logging.ParseFormat(c.String("log-format"))
	if err != nil {
		return cmdline.Usagef(c, "%s", err)
	}
	if plan.Logger, err = logging.New(logging.Config{Level: zapcore.ErrorLevel, Verbose: c.Bool("verbose"), Console: logging.ConsoleFor(format)}); err != nil {
		return err
	}
	defer plan.Logger.Sync()
	if list := c.String("gpu-devices"); list != "" {
		if plan.GPUDevices, err = gpu.Parse(list); err != nil {
			return cmdline.Usagef(c, "--gpu-devices: %s", err)
		}
	} else if plan.GPUDevices, err = gpu.FromEnvironment(); err != nil {
		plan.GPUError = err.Error()
	}
	if plan.Fabric, err = fabricPath(context.Background(), c, plan.Logger, c.String("gpu-devices") == "" && len(plan.GPUDevices) > 0); err != nil {
		return err
	}
	// A GPU count, given or the platform's, says whether this node must
	// have GPUs to be ready; without one, its NVIDIA device files do.
	switch {
	case plan.GPUs > 0:
		plan.GPUsExpected = fmt.Sprintf("%d GPUs per node were asked for", plan.GPUs)
	case !f.gpus.IsSet() && plan.From["GPUsPerNode"] == "":
		if file := gpu.DeviceFile("/dev"); file != "" {
			plan.GPUsExpected = file + " exists"
		}
	}
	if !f.gpus.IsSet() && !f.nproc.IsSet() && plan.GPUs == 0 {
		// Neither flags nor the platform say: every GPU the node has.
		plan.GPUs = len(plan.GPUDevices)
	}

	sigs, stopSignals := cmdline.CatchSignals(plan.Forward)
	defer stopSignals()
	plan.Signals = sigs
	ctx := context.Background()

	if c.Bool("dry-run") {
		// One look at the rendezvous host's name, not a wait for it.
		once := *plan
		once.JoinTimeout = time.Nanosecond
		what := "not decided yet: "
		if role, err := entrypoint.DecideRole(ctx, &once, entrypoint.LocalAddrs, os.Stderr); err == nil {
			what = role.String()
		} else {
			what += err.Error()
		}
		for _, line := range plan.Describe(what) {
			fmt.Println(line)
		}
		return nil
	}
	code, err := entrypoint.Run(ctx, plan)
	if err != nil {
		return cli.Exit(err.Error(), max(code, 1))
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// parseNNodes reads N or MIN:MAX; "" is 0 (not given).
func parseNNodes(s string) (nnodes, least int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	most, min, err := cmdline.ParseNodeRange(s, jobspec.MaxNodes)
	if err != nil {
		return 0, 0, fmt.Errorf("--nnodes %q: %w", s, err)
	}
	return int(most), int(min), nil
}
