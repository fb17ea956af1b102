package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/launch"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a job: on this machine (the embedded default) or on a cluster (--cluster)",
		ArgsUsage: "[--] COMMAND [ARGS...]",
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "nnodes", Aliases: []string{"n"}, Value: 1, Usage: "number of nodes"},
			&cli.IntFlag{Name: "gpus", Usage: "GPUs per node; one worker per GPU unless --nproc says otherwise"},
			&cli.IntFlag{Name: "nproc", Usage: "workers per node (without --gpus: workers with no GPU)"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"x"}, Usage: "`VAR` passes the launcher's value of VAR, VAR=value sets it; never overwritten"},
			&cli.StringFlag{Name: "log-dir", Usage: "write each rank's output to `DIR`/rank-N.log"},
			&cli.DurationFlag{Name: "kill-timeout", Value: 10 * time.Second, Usage: "grace between SIGTERM and SIGKILL when stopping workers"},
			&cli.DurationFlag{Name: "timeout", Usage: "wall-clock limit for the job; exit code 124 when reached"},
			&cli.BoolFlag{Name: "tag-output", Value: true, Usage: "prefix each output line with [rank] (--no-tag-output turns it off)"},
			&cli.BoolFlag{Name: "no-tag-output", Usage: "print output lines as they are"},
			&cli.BoolFlag{Name: "isolate-gpus", Usage: "show each worker only its own GPUs"},
			&cli.BoolFlag{Name: "no-nccl-autodetect", Usage: "do not set NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_GID_INDEX"},
			&cli.StringFlag{Name: "workdir", Usage: "workers' working directory (default: the current one on the embedded default, the agent's on a cluster)"},
			&cli.BoolFlag{Name: "embedded", Usage: "run the store and an agent inside the launcher even when an agent serves this machine"},
			&cli.StringFlag{Name: "gpu-devices", Usage: "declare this machine's GPUs (`LIST` of indices) instead of asking NVML; embedded default only", Hidden: true},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log what the store and agent do"},
		}, clusterFlags()...),
		Action: run,
	}
}

func run(c *cli.Context) error {
	argv := c.Args().Slice()
	if len(argv) == 0 {
		return cli.Exit("no command given: launcher run [flags] -- COMMAND [ARGS...]", 2)
	}
	env, err := userEnv(c.StringSlice("env"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	spec := &musterv1.JobSpec{
		Argv:           argv,
		Nnodes:         int32(c.Int("nnodes")),
		Gpus:           int32(c.Int("gpus")),
		Nproc:          int32(c.Int("nproc")),
		Env:            env,
		LogDir:         c.String("log-dir"),
		KillTimeoutMs:  c.Duration("kill-timeout").Milliseconds(),
		TimeoutMs:      c.Duration("timeout").Milliseconds(),
		IsolateGpus:    c.Bool("isolate-gpus"),
		NcclAutodetect: !c.Bool("no-nccl-autodetect"),
		InheritEnv:     true,
		Workdir:        c.String("workdir"),
	}
	if err := rendezvous.ValidateSpec(spec); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	log, err := newLogger(c.Bool("verbose"))
	if err != nil {
		return err
	}
	defer log.Sync()

	// Signals are caught from the start so that Ctrl-C never leaves workers behind.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx := context.Background()

	var client *rendezvous.Client
	// Without --cluster, an agent serving this machine takes the job (its
	// Unix socket); without one, the launcher runs the embedded default.
	var cluster string
	if c.Bool("embedded") {
		if c.String("cluster") != "" {
			return cli.Exit("--embedded and --cluster: give one", 2)
		}
	} else {
		cluster = clusterAddr(c)
	}
	if rendezvous.IsUnixAddr(cluster) && spec.Workdir == "" {
		// The agent is on this machine: the job starts where the launcher is.
		spec.Workdir, _ = os.Getwd()
	}
	if cluster == "" {
		if spec.Nnodes > 1 {
			return cli.Exit(fmt.Sprintf("--nnodes %d needs a cluster: without --cluster the launcher runs one node, this one. "+
				"Start `agent` on each node and pass --cluster HOST:PORT (or set MUSTER_CLUSTER); see README.md", spec.Nnodes), 2)
		}
		if spec.Workdir == "" {
			spec.Workdir, _ = os.Getwd()
		}
		cfg := launch.EmbeddedConfig{Logger: log, DiscoverGPUs: spec.Gpus > 0}
		if list := c.String("gpu-devices"); list != "" {
			if cfg.GPUs, err = gpu.Parse(list); err != nil {
				return cli.Exit("--gpu-devices: "+err.Error(), 2)
			}
		}
		emb, err := launch.StartEmbedded(ctx, cfg)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		defer emb.Close(0)
		if client, err = rendezvous.Dial(emb.Store.Addr(), rendezvous.Security{}); err != nil {
			return cli.Exit(err.Error(), 1)
		}
	} else {
		sec, err := clusterSecurity(c, cluster)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		if client, err = rendezvous.Dial(cluster, sec); err != nil {
			return cli.Exit(err.Error(), 1)
		}
	}
	defer client.Close()

	code, err := launch.Run(ctx, log, client, launch.Options{
		Spec:      spec,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		TagOutput: c.Bool("tag-output") && !c.Bool("no-tag-output"),
		Signals:   sigs,
	})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// userEnv resolves -x flags: VAR takes the launcher's value, VAR=value sets it.
func userEnv(flags []string) ([]string, error) {
	var env []string
	for _, f := range flags {
		if strings.Contains(f, "=") {
			env = append(env, f)
			continue
		}
		v, ok := os.LookupEnv(f)
		if !ok {
			return nil, fmt.Errorf("-x %s: %s is not set in the launcher's environment (use -x %s=value to set it)", f, f, f)
		}
		env = append(env, f+"="+v)
	}
	return env, nil
}
