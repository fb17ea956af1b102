package main

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/embedded"
	"github.com/musterhq/muster/eventfile"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/launch"
	"github.com/musterhq/muster/ncclprobe"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// runFlags are the values of run's flags that urfave/cli's own types would
// parse wrongly: counts that must fit the wire, durations in seconds, -x
// values with commas.
type runFlags struct {
	nnodes               *cmdline.NodeRange
	gpus, nproc          *cmdline.Count
	maxRestarts          *cmdline.Count
	lastCall             *cmdline.Duration
	noRestartCodes       *cmdline.ExitCodes
	backoff, backoffMax  *cmdline.Duration
	healthTimeout        *cmdline.Duration
	env                  *cmdline.List
	killTimeout, timeout *cmdline.Duration
	waitTimeout          *cmdline.Duration
	stdin                *launch.Stdin
	memoryLimit          *cmdline.Size
	outputRanks          *cmdline.Ranks
	hangTimeout          *cmdline.Duration
	hangFirst            *cmdline.Duration
	forward              *cmdline.Signals
	cpuBind              *cmdline.Choice
}

// cpuBindUsage is --cpu-bind's help.
const cpuBindUsage = "bind each worker's CPUs and memory to its own GPUs' (`MODE`): none, numa (its GPUs' NUMA nodes), socket, " +
	"or cores (a fair share of those nodes' cores to itself); also torchrun's --numa-binding node|socket|exclusive"

func runCommand() *cli.Command {
	f := runFlags{
		nnodes:         cmdline.NewNodeRange(1, jobspec.MaxNodes),
		lastCall:       cmdline.NewDuration(30 * time.Second),
		noRestartCodes: &cmdline.ExitCodes{},
		backoff:        cmdline.NewDuration(time.Second),
		backoffMax:     cmdline.NewDuration(30 * time.Second),
		healthTimeout:  cmdline.NewDuration(jobspec.DefaultHealthTimeout),
		gpus:           cmdline.NewCount(0, 0, jobspec.MaxGPUs),
		nproc:          cmdline.NewCount(0, 1, jobspec.MaxNProc), // 0, the default: one per GPU, else 1
		maxRestarts:    cmdline.NewCount(0, 0, jobspec.MaxRestarts),
		env:            &cmdline.List{},
		killTimeout:    cmdline.NewDuration(10 * time.Second),
		timeout:        cmdline.NewDuration(0),
		waitTimeout:    cmdline.NewDuration(defaultWaitTimeout),
		stdin:          &launch.Stdin{},
		memoryLimit:    &cmdline.Size{},
		outputRanks:    &cmdline.Ranks{},
		hangTimeout:    cmdline.NewDuration(0),
		hangFirst:      cmdline.NewDuration(0),
		forward:        cmdline.NewSignals(jobspec.DefaultForwardSignals),
		cpuBind:        cmdline.NewChoice("", launch.ParseCPUBind),
	}
	return &cli.Command{
		Name:               "run",
		Usage:              "run a job: on this machine (the embedded default) or on a cluster (--cluster)",
		ArgsUsage:          "[--] COMMAND [ARGS...]",
		CustomHelpTemplate: runHelpTemplate(),
		Flags: slices.Concat(
			cmdline.InCategory(catPlacement, append([]cli.Flag{
				cmdline.Flag(f.nnodes, "nnodes", []string{"n"}, "number of `NODES`, or MIN:MAX for an elastic job: it starts once MIN fit and MAX are not all there after --last-call"),
				cmdline.Flag(f.lastCall, "last-call", nil, "with -n MIN:MAX, how long a round waits for more nodes once MIN fit (`DURATION`)"),
				cmdline.Flag(f.gpus, "gpus", nil, "`GPUS` per node; one worker per GPU unless --nproc says otherwise"),
				cmdline.WithDefaultText(cmdline.Flag(f.nproc, "nproc", []string{"np", "nproc-per-node", "nproc_per_node", "npernode"},
					"`WORKERS` per node, 1 or more (without --gpus: workers with no GPU); also -np, --nproc-per-node, --nproc_per_node, -npernode"),
					"one per GPU, else 1"),
				cmdline.WithDefaultText(cmdline.Flag(f.cpuBind, "cpu-bind", []string{"numa-binding", "numa_binding"}, cpuBindUsage), "none"),
			}, placementFlags()...)...),
			cmdline.InCategory(catEnvironment,
				cmdline.Flag(f.env, "env", []string{"x"}, "`VAR` passes the launcher's value of VAR, VAR=value sets it (commas and spaces kept); never overwritten"),
				&cli.StringFlag{Name: "workdir", Usage: "workers' working `DIR` (default: the current one on the embedded default, the agent's on a cluster)"},
				&cli.BoolFlag{Name: "isolate-gpus", Usage: "show each worker only its own GPUs"},
				&cli.BoolFlag{Name: "no-nccl-autodetect", Usage: "do not set NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_GID_INDEX"},
				&cli.BoolFlag{Name: "no-agent-store", Usage: "rank 0 hosts PyTorch's TCPStore on MASTER_PORT, as without an agent (by default node rank 0's agent serves it for the job's life, and workers get TORCHELASTIC_USE_AGENT_STORE=True)"},
			),
			cmdline.InCategory(catPython,
				&cli.BoolFlag{Name: "module", Aliases: []string{"m"}, Usage: "the command is a Python module and its arguments: each worker runs python3 -u -m MODULE ARGS, as torchrun -m does (PYTHON_EXEC names another Python)"},
				&cli.BoolFlag{Name: "no-python", Usage: "run a .py program as given, not under python3 -u as by default (also --no_python)"},
			),
			cmdline.InCategory(catOutput,
				cmdline.Flag(f.stdin, "stdin", nil, "which rank reads the launcher's stdin: a `RANK`, all (a copy each) or none; the others get /dev/null"),
				&cli.BoolFlag{Name: "tag-output", Value: true, Usage: "prefix each output line with [rank] (--no-tag-output turns it off)"},
				&cli.BoolFlag{Name: "no-tag-output", Usage: "print output lines as they are, untagged (a last line without its newline gets one, so that ranks' lines stay apart)"},
				&cli.StringFlag{Name: "events", TakesFile: true, Usage: "append the job's lifecycle to `FILE` as JSON lines: submitted, waiting, each round (nodes, unique-ID hash), each rank's start and exit, node lost, restart, ended"},
				cmdline.Flag(f.outputRanks, "output-ranks", []string{"local-ranks-filter", "local_ranks_filter"}, "print only these ranks' output (`LIST`: 0,2-5); --log-dir still gets every rank's; also --local-ranks-filter"),
				&cli.BoolFlag{Name: "tty", Usage: "give each printed rank's stdout (and stderr, when the launcher's is one) a pseudo-terminal of the launcher's size, so that progress bars and colours show as under torchrun; on by default for one printed rank on the embedded default without --log-dir (--no-tty turns it off)"},
				&cli.BoolFlag{Name: "no-tty", Usage: "workers' output on pipes, never a pseudo-terminal"},
				&cli.BoolFlag{Name: "timestamp-output", Usage: "prefix each output line with the time the launcher got it (UTC, RFC 3339 with milliseconds)"},
				&cli.BoolFlag{Name: "report-bindings", Usage: "print each rank's GPUs, their NUMA node, its CPUs (bound by --cpu-bind or not) and nearest NIC as it starts"},
				&cli.StringFlag{Name: "log-dir", Usage: "write each rank's stdout to `DIR`/JOB-ID/rank-N.log and its stderr to rank-N.err.log (each job a directory of its own)"},
				&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log what the store and agent do"},
			),
			cmdline.InCategory(catFailures,
				cmdline.Flag(f.timeout, "timeout", nil, "wall-clock limit for the job (`DURATION`: 30s, 2h, or seconds; 0 for none); exit code 124 when reached"),
				cmdline.Flag(f.killTimeout, "kill-timeout", nil, "grace between SIGTERM and SIGKILL when stopping workers (`DURATION`: 30s, 2m, or seconds)"),
				cmdline.WithDefaultText(cmdline.Flag(f.memoryLimit, "memory-limit", nil, "each worker's memory limit (`SIZE`: 512M, 2G), in a cgroup of its own: past it the kernel's OOM killer kills it, and muster says so"), "none"),
				cmdline.Flag(f.maxRestarts, "max-restarts", []string{"max_restarts"}, "after a failed worker or a lost node, start the job again (a new unique ID, an empty TCPStore), up to `K` times in all (TORCHELASTIC_RESTART_COUNT counts them)"),
				&cli.StringFlag{Name: "restart-on", Value: "any", Usage: "which failures --max-restarts restarts: `any` (a failed worker or a lost node) or node-loss"},
				cmdline.Flag(f.noRestartCodes, "no-restart-exit-codes", nil, "a worker exiting with one of these codes (a comma-separated `LIST`, e.g. 93) fails the job without a restart"),
				cmdline.Flag(f.backoff, "restart-backoff", nil, "wait before the first restart's round (`DURATION`), doubled for each restart after a round that ran under 5 minutes; 0 for none"),
				cmdline.Flag(f.backoffMax, "restart-backoff-max", nil, "the longest wait between restarts (`DURATION`)"),
				&cli.StringFlag{Name: "health-check", Usage: "each node runs `CMD` (with /bin/sh -c) before the workers of every round; a node where it does not exit 0 is left out of the job's rounds"},
				cmdline.Flag(f.healthTimeout, "health-check-timeout", nil, "how long --health-check may run (`DURATION`)"),
				cmdline.Flag(f.hangTimeout, "hang-timeout", nil, "a worker that gives no heartbeat (touching $MUSTER_HEARTBEAT_FILE) for `DURATION` is hung: its Python stacks and PyTorch's NCCL flight recorder are dumped and the job stops, as for a failed worker (0: off)"),
				cmdline.WithDefaultText(cmdline.Flag(f.hangFirst, "hang-first-timeout", nil, "with --hang-timeout, the timeout before a worker's first heartbeat, for slow starts (`DURATION`)"), "--hang-timeout"),
				&cli.BoolFlag{Name: "hang-on-silence", Usage: "with --hang-timeout, every line a worker writes is a heartbeat too"},
				cmdline.Flag(f.forward, "forward-signals", nil, "signals the launcher sends on to every worker instead of stopping the job (`LIST`: USR1,USR2,TERM..., or none)"),
			),
			cmdline.InCategory(catMPI,
				&cli.StringFlag{Name: "mpi", Usage: "the agents serve `MPI`'s process manager interface, so its programs start without mpiexec: mpich (MPICH, Intel MPI), or openmpi (mpirun on node rank 0, the agents its remote shell)"},
			),
			cmdline.InCategory(catCluster, append(clusterFlags(false),
				cmdline.Flag(f.waitTimeout, "wait-timeout", nil, "on a cluster, how long the job waits for --nnodes nodes with --gpus free GPUs, printing progress (`DURATION`; 0 fails at once)"),
				&cli.BoolFlag{Name: "embedded", Usage: "run the store and an agent inside the launcher even when an agent serves this machine"},
				&cli.StringFlag{Name: "gpu-devices", Usage: "declare this machine's GPUs (`LIST` of indices) instead of asking NVML; embedded default only", Hidden: true},
			)...),
			[]cli.Flag{&cli.BoolFlag{Name: "no_python", Hidden: true}},
			cmdline.ForeignFlags(foreignRunFlags),
		),
		Action: func(c *cli.Context) error { return run(c, f) },
	}
}

func run(c *cli.Context, f runFlags) error {
	if err := cmdline.CheckForeign(c, foreignRunFlags); err != nil {
		return err
	}
	spec, err := jobSpec(c, f)
	if err != nil {
		return err
	}
	var events *eventfile.Writer
	if name := c.String("events"); name != "" {
		if events, err = eventfile.Open(name); err != nil {
			return cli.Exit(err.Error(), cmdline.UsageExitCode)
		}
		defer events.Close()
	} else if c.IsSet("events") {
		return cmdline.Usagef(c, "--events: empty file name")
	}
	log, err := newLogger(c.Bool("verbose"))
	if err != nil {
		return err
	}
	defer log.Sync()

	// Signals are caught from the start so that Ctrl-C never leaves workers behind.
	sigs, stopSignals := cmdline.CatchSignals(f.forward.Values())
	defer stopSignals()
	ctx := context.Background()

	// Without --cluster, an agent serving this machine takes the job (its
	// Unix socket); without one, the launcher runs the embedded default.
	target, err := launch.ChooseTarget(c.Bool("embedded"), c.String("cluster"), security.FindLocalAgent)
	if err != nil {
		return usageError(c, err)
	}
	if err := target.Prepare(spec, f.waitTimeout.Value(), f.nproc.IsSet() || f.gpus.IsSet()); err != nil {
		return usageError(c, err)
	}
	client, closeClient, err := dialTarget(ctx, c, log, target, spec.Gpus > 0)
	if err != nil {
		return err
	}
	defer closeClient()

	var note string
	if spec.Tty, note = launch.Terminal(terminalRequest(c, f, spec, target)); note != "" {
		os.Stderr.WriteString(note + "\n")
	}
	code, err := launch.Run(ctx, log, client, launch.Options{
		Spec:            spec,
		Stdin:           launch.StdinReader(os.Stdin),
		Stdout:          os.Stdout,
		Stderr:          os.Stderr,
		TagOutput:       c.Bool("tag-output") && !c.Bool("no-tag-output"),
		Signals:         sigs,
		Store:           target.Store,
		Liveness:        target.Liveness(),
		Reattach:        target.Reattach(),
		Events:          events,
		OutputRanks:     f.outputRanks.Contains,
		TimestampOutput: c.Bool("timestamp-output"),
		Forward:         f.forward.Values(),
		ReportBindings:  c.Bool("report-bindings"),
	})
	if err != nil {
		// 128+signal for a launcher that gave the job up on a second Ctrl-C.
		return cli.Exit(err.Error(), max(code, 1))
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// jobSpec is the job run's flags and command ask for, checked, its
// defaults filled in.
func jobSpec(c *cli.Context, f runFlags) (*musterv1.JobSpec, error) {
	argv := c.Args().Slice()
	if len(argv) == 0 {
		return nil, cmdline.Usagef(c, "no command given: launcher run [flags] -- COMMAND [ARGS...]")
	}
	py := launch.Python{Module: c.Bool("module"), NoPython: c.Bool("no-python") || c.Bool("no_python"), Exec: os.Getenv("PYTHON_EXEC")}
	argv, err := py.Argv(argv)
	if err != nil {
		return nil, cmdline.Usagef(c, "%s", err)
	}
	env, err := launch.ResolveEnv(f.env.Values(), os.LookupEnv)
	if err != nil {
		return nil, cmdline.Usagef(c, "%s", err)
	}
	job := launch.Job{
		Argv: argv, Nnodes: f.nnodes.Most(), MinNodes: f.nnodes.Least(), GPUs: f.gpus.Int32(), NProc: f.nproc.Int32(),
		Env: env, LogDir: []byte(c.String("log-dir")), Workdir: []byte(c.String("workdir")),
		KillTimeout: f.killTimeout.Value(), Timeout: f.timeout.Value(), MaxRestarts: f.maxRestarts.Int32(),
		IsolateGPUs: c.Bool("isolate-gpus"), NoNCCLAutodetect: c.Bool("no-nccl-autodetect"),
		MPI: c.String("mpi"), CPUBind: f.cpuBind.String(), NoAgentStore: c.Bool("no-agent-store"), MemoryLimit: f.memoryLimit.Bytes(),
		HangTimeout: f.hangTimeout.Value(), HangFirstTimeout: f.hangFirst.Value(), HangOnSilence: c.Bool("hang-on-silence"),
	}
	if job.MinNodes > 0 {
		job.LastCall = f.lastCall.Value()
	}
	if job.Policy.RestartOn, err = jobspec.ParseRestartOn(c.String("restart-on")); err != nil {
		return nil, cmdline.Usagef(c, "%s", err)
	}
	job.Policy.NoRestartExitCodes = f.noRestartCodes.Codes()
	job.Policy.RestartBackoff, job.Policy.RestartBackoffMax = f.backoff.Value(), f.backoffMax.Value()
	job.Policy.HealthCheck, job.Policy.HealthCheckTimeout = c.String("health-check"), f.healthTimeout.Value()
	spec := job.Spec()
	if err := placement(c, f).Apply(spec); err != nil {
		return nil, usageError(c, err)
	}
	f.stdin.Apply(spec)
	if err := jobspec.Validate(spec); err != nil {
		return nil, cmdline.Usagef(c, "%s", err)
	}
	jobspec.Defaults(spec)
	if world := int64(spec.Nnodes) * int64(spec.Nproc); !f.outputRanks.Below(world) {
		return nil, cmdline.Usagef(c, "--output-ranks %s: the job's ranks are 0..%d", f.outputRanks, world-1)
	}
	return spec, nil
}

// dialTarget connects to the store that runs the job: the embedded
// default's, started here, or a cluster's. closeClient closes both.
func dialTarget(ctx context.Context, c *cli.Context, log *zap.Logger, target launch.Target, gpus bool) (client *storeclient.Client, closeClient func(), err error) {
	if !target.Embedded() {
		sec, err := clusterSecurity(c, target.Store)
		if err != nil {
			return nil, nil, cli.Exit(err.Error(), cmdline.UsageExitCode)
		}
		if client, err = storeclient.DialCluster(target.Store, target.Replicas, sec); err != nil {
			return nil, nil, cli.Exit(err.Error(), 1)
		}
		return client, func() { client.Close() }, nil
	}
	cfg := embedded.Config{Logger: log, DiscoverGPUs: gpus, NCCLVersion: ncclprobe.Self()}
	if list := c.String("gpu-devices"); list != "" {
		if cfg.GPUs, err = gpu.Parse(list); err != nil {
			return nil, nil, cli.Exit("--gpu-devices: "+err.Error(), cmdline.UsageExitCode)
		}
	}
	emb, err := embedded.Start(ctx, cfg)
	if err != nil {
		return nil, nil, cli.Exit(err.Error(), 1)
	}
	if client, err = storeclient.DialInProcess(emb.Store.Addr(), security.Security{}); err != nil {
		emb.Close(0)
		return nil, nil, cli.Exit(err.Error(), 1)
	}
	return client, func() { client.Close(); emb.Close(0) }, nil
}

// terminalRequest is what decides whether the printed ranks get a
// pseudo-terminal.
func terminalRequest(c *cli.Context, f runFlags, spec *musterv1.JobSpec, target launch.Target) launch.TerminalRequest {
	tty := launch.TerminalRequest{Stdout: os.Stdout, Stderr: os.Stderr, Embedded: target.Embedded(),
		World: int64(spec.Nnodes) * int64(jobspec.WorkersPerNode(spec)), OutputRanks: f.outputRanks.Spans(),
		LogDir: len(spec.LogDir) > 0, Tag: c.Bool("tag-output") && !c.Bool("no-tag-output"),
		Timestamp: c.Bool("timestamp-output"), Term: os.Getenv("TERM")}
	if c.IsSet("tty") || c.Bool("no-tty") {
		on := c.Bool("tty") && !c.Bool("no-tty")
		tty.Asked = &on
	}
	return tty
}

// defaultWaitTimeout is how long a job waits for its nodes by default:
// torchrun's rendezvous waits as long (join_timeout, 600 s), time for nodes
// of a cloud fleet or a batch allocation to boot and start their agents,
// while progress shows what is missing from the first second.
const defaultWaitTimeout = 10 * time.Minute
