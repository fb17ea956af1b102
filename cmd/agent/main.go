// Command agent is muster's node daemon. It can host the rendezvous store
// (--listen) and runs this node's workers.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/ncclprobe"
	"github.com/musterhq/muster/openmpi"
	"github.com/musterhq/muster/supervise"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/jobhistory"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/logging"
	"github.com/musterhq/muster/node"
	"github.com/musterhq/muster/ranklog"
	"github.com/musterhq/muster/replica"
	"github.com/musterhq/muster/security"
)

func main() {
	// An Open MPI job's workers, and mpirun's remote shell, are this binary.
	openmpi.RunIfRequested()
	ncclprobe.RunIfRequested(engine.LibraryNCCLVersion)
	// As PID 1 (a container's entrypoint), the agent runs as the child of a
	// minimal init that reaps orphans and forwards signals to it.
	supervise.RunInitIfPID1()
	nodeRank := cmdline.NewCount(-1, -1, jobspec.MaxNodes-1)
	killTimeout := cmdline.NewDuration(10 * time.Second)
	nodeTimeout := cmdline.NewDuration(cluster.DefaultNodeTimeout)
	keptSize := cmdline.NewBytes(0)
	keptAge := cmdline.NewDuration(ranklog.DefaultMaxAge)
	historyJobs := cmdline.NewCount(jobhistory.DefaultMaxJobs, 1, 100_000)
	historyAge := cmdline.NewDuration(jobhistory.DefaultMaxAge)
	healthTimeout := cmdline.NewDuration(jobspec.DefaultHealthTimeout)
	app := &cli.App{
		Name:                  "agent",
		Usage:                 "run this node's muster agent, and the cluster's store with --listen",
		CustomAppHelpTemplate: agentHelpTemplate(),
		ArgsUsage:             " ",
		Flags: slices.Concat(
			cmdline.InCategory("Store",
				&cli.StringFlag{Name: "listen", EnvVars: []string{"MUSTER_LISTEN"}, Usage: "host the store on `HOST:PORT` (default 127.0.0.1:29400 without --join); every call over TCP needs the cluster token, and an address other than loopback also TLS"},
				&cli.StringFlag{Name: "store", EnvVars: []string{"MUSTER_STORE"}, Usage: "join the store at `HOST:PORT` (or unix:///PATH of its socket) instead of hosting one or finding it through gossip; a replicated store's replicas as a list, HOST:PORT,HOST:PORT,..."},
				&cli.StringFlag{Name: "store-peers", EnvVars: []string{"MUSTER_STORE_PEERS"}, Usage: "with --listen, host one replica of a replicated store: every replica's `HOST:PORT,...` (3 or 5), --listen's among them, the same list on each; raft uses the port after each (docs/operations.md)"},
				&cli.BoolFlag{Name: "store-join", Usage: "with --store-peers, this replica is new to a running store: it waits for launcher stores add instead of beginning the store"},
				&cli.BoolFlag{Name: "store-alone", Usage: "with --store-peers, recover a store that lost its quorum for good: this replica, with the table in --data-dir, becomes its only replica (docs/operations.md); on one replica only, once"},
				&cli.StringFlag{Name: "socket", EnvVars: []string{"MUSTER_SOCKET"}, Usage: "with --listen, also serve the store on the Unix socket `PATH` for launchers on this machine " +
					"(default: " + security.SystemSocket + " as root, where every local user may submit and their jobs run as them; " +
					"else $XDG_RUNTIME_DIR/muster/agent.sock, for this user only)"},
				&cli.StringFlag{Name: "data-dir", EnvVars: []string{"MUSTER_DATA_DIR"}, Usage: "with --listen, keep the store's job history in `DIR` (" + jobhistory.FileName + "), which outlives a restart; \"\" keeps it in memory only " +
					"(default: systemd's StateDirectory, else /var/lib/muster as root, else $XDG_STATE_HOME/muster or ~/.local/state/muster)"},
				cmdline.WithEnv(cmdline.Flag(historyJobs, "history-max-jobs", nil, "keep at most `N` finished jobs in the store's history; the oldest go first"), "MUSTER_HISTORY_MAX_JOBS"),
				cmdline.WithEnv(cmdline.Flag(historyAge, "history-max-age", nil, "keep a finished job in the store's history for `DURATION` (168h is a week)"), "MUSTER_HISTORY_MAX_AGE"),
			),
			cmdline.InCategory("Cluster",
				&cli.StringFlag{Name: "join", EnvVars: []string{"MUSTER_JOIN"}, Usage: "gossip with these `PEERS` (HOST[:PORT],...; port 7946 by default) and, without --listen or --store, use the store they know"},
				&cli.StringFlag{Name: "bind", EnvVars: []string{"MUSTER_BIND"}, Usage: "gossip on `IP[:PORT]` (default 0.0.0.0:7946); gossip is on with --join, --bind or --advertise, or --listen on an address other than loopback"},
				&cli.StringFlag{Name: "advertise", EnvVars: []string{"MUSTER_ADVERTISE"}, Usage: "the `IP[:PORT]` other nodes gossip with this one on (default: the --bind IP, else --addr, else the --listen IP, else a private IP of this host)"},
				&cli.StringFlag{Name: "name", EnvVars: []string{"MUSTER_NAME"}, Usage: "this node's `NAME` (default: the host name); unique in the cluster"},
				&cli.StringFlag{Name: "addr", EnvVars: []string{"MUSTER_ADDR"}, Usage: "this node's `IP` for workers (MASTER_ADDR, NCCL root); default: the gossip address, else the --listen host, else 127.0.0.1"},
				cmdline.WithEnv(cmdline.WithDefaultText(cmdline.Flag(nodeRank, "node-rank", nil, "explicit node `RANK`; nodes without one are ordered by --topology, then by name"), "none"), "MUSTER_AGENT_NODE_RANK"),
				topologyFlag(),
				cmdline.WithEnv(cmdline.Flag(nodeTimeout, "node-timeout", nil, nodeTimeoutUsage), "MUSTER_NODE_TIMEOUT"),
			),
			cmdline.InCategory("Security",
				&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "`FILE` holding the cluster token; with --listen it is " +
					"created (mode 0600) when missing (default: " + security.SystemTokenFile + " as root, else ~/.config/muster/token)"},
				&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"MUSTER_TLS_CERT"}, Usage: "the store's TLS certificate `FILE`"},
				&cli.StringFlag{Name: "tls-key", EnvVars: []string{"MUSTER_TLS_KEY"}, Usage: "the store's TLS key `FILE`"},
				&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"MUSTER_TLS_CA"}, Usage: "`FILE` of the CA certificate that signed the store's certificate"},
			),
			cmdline.InCategory("GPUs and health",
				&cli.StringFlag{Name: "gpu-devices", EnvVars: []string{"MUSTER_GPU_DEVICES"}, Usage: "offer these GPUs (`LIST` of indices) instead of the ones NVML finds"},
				&cli.StringFlag{Name: "health-check", EnvVars: []string{"MUSTER_HEALTH_CHECK"}, Usage: "run `CMD` (with /bin/sh -c) before the workers of every round of every job; a node where it does not exit 0 is left out of the job's rounds"},
				cmdline.WithEnv(cmdline.Flag(healthTimeout, "health-check-timeout", nil, "how long --health-check may run (`DURATION`)"), "MUSTER_HEALTH_CHECK_TIMEOUT"),
			),
			cmdline.InCategory("Workers",
				cmdline.WithEnv(cmdline.Flag(killTimeout, "kill-timeout", nil, "the most grace workers get when the agent stops, each job's own --kill-timeout when shorter (`DURATION`: 30s, 2m, or seconds)"), "MUSTER_KILL_TIMEOUT"),
				&cli.StringFlag{Name: "rank-logs", EnvVars: []string{"MUSTER_RANK_LOGS"}, Value: ranklog.DefaultDir(),
					Usage: "keep each rank's output of recent jobs in `DIR`, for `launcher logs` (none: keep nothing)"},
				cmdline.WithEnv(cmdline.WithDefaultText(cmdline.Flag(keptSize, "rank-logs-max-size", nil, "bound the kept output to `SIZE` (512M, 2G), the oldest jobs dropped first"), "1G, or a tenth of its file system if less"), "MUSTER_RANK_LOGS_MAX_SIZE"),
				cmdline.WithEnv(cmdline.Flag(keptAge, "rank-logs-max-age", nil, "drop a job's kept output `DURATION` after its last line"), "MUSTER_RANK_LOGS_MAX_AGE"),
			),
			cmdline.InCategory("Logs and metrics",
				&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"MUSTER_METRICS_ADDR"}, Usage: metricsAddrUsage},
				&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, EnvVars: []string{"MUSTER_VERBOSE"}, Usage: "log debug detail, memberlist's own lines included"},
				&cli.StringFlag{Name: "log-format", Value: "auto", EnvVars: []string{"MUSTER_LOG_FORMAT"}, Usage: "`auto` (lines for a person when stderr is a terminal, JSON otherwise), console or json"},
			),
		),
		Action: func(c *cli.Context) error {
			kept := ranklog.Config{Dir: c.String("rank-logs"), MaxBytes: keptSize.Value(), MaxAge: keptAge.Value()}
			if kept.Dir == "none" {
				kept.Dir = ""
			}
			if historyAge.Value() <= 0 {
				return cmdline.Usagef(c, "--history-max-age (MUSTER_HISTORY_MAX_AGE) 0: give how long finished jobs are kept, e.g. 168h")
			}
			dataDir := jobhistory.DefaultDir()
			if c.IsSet("data-dir") {
				dataDir = c.String("data-dir")
			}
			history := jobhistory.Config{Dir: dataDir, MaxJobs: int(historyJobs.Int32()), MaxAge: historyAge.Value()}
			return runAgent(c, nodeRank.Int32(), killTimeout.Value(), nodeTimeout.Value(), healthTimeout.Value(), kept, history)
		},
		Commands: []*cli.Command{cmdline.RunsCommand(runCommand()), cmdline.CompletionCommand()},
	}
	os.Exit(cmdline.Run(app, os.Args))
}

// metricsAddrUsage is --metrics-addr's help, agent's and agent run's.
const metricsAddrUsage = "serve Prometheus metrics (/metrics) and probes (/healthz, /readyz, gRPC health) on `HOST:PORT`, " +
	"without a token (off by default; e.g. 127.0.0.1:29401, or :29401 for Prometheus and Kubernetes to reach)"

// checkMetricsAddr refuses a --metrics-addr that is no HOST:PORT.
func checkMetricsAddr(c *cli.Context) error {
	addr := c.String("metrics-addr")
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || (n == 0 && port != "0") {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err != nil {
		return cmdline.Usagef(c, "--metrics-addr (MUSTER_METRICS_ADDR) %q: want HOST:PORT, such as 127.0.0.1:29401 (%v)", addr, err)
	}
	return nil
}

// nodeTimeoutUsage is --node-timeout's help, agent's and agent run's.
const nodeTimeoutUsage = "how long a node may be silent before gossip declares it dead and its jobs fail (`DURATION`, 1s to 10m); the same on every node"

func runAgent(c *cli.Context, nodeRank int32, killTimeout, nodeTimeout, healthTimeout time.Duration, kept ranklog.Config, history jobhistory.Config) error {
	if c.NArg() > 0 {
		return cmdline.Usagef(c, "unexpected argument %q", c.Args().First())
	}
	if err := checkMetricsAddr(c); err != nil {
		return err
	}
	if err := cluster.CheckNodeTimeout(nodeTimeout); err != nil {
		return cmdline.Usagef(c, "--node-timeout (MUSTER_NODE_TIMEOUT) %s: want %s to %s", nodeTimeout, cluster.MinNodeTimeout, cluster.MaxNodeTimeout)
	}
	format, err := logging.ParseFormat(c.String("log-format"))
	if err != nil {
		return cmdline.Usagef(c, "%s", err)
	}
	log, err := logging.New(logging.Config{Level: zapcore.InfoLevel, Verbose: c.Bool("verbose"), Console: logging.ConsoleFor(format)})
	if err != nil {
		return err
	}
	defer log.Sync()

	listen, storeAddr := c.String("listen"), c.String("store")
	var storePeers, joinReplicas []string
	if p := c.String("store-peers"); p != "" {
		if listen == "" {
			return cmdline.Usagef(c, "--store-peers (MUSTER_STORE_PEERS) lists the replicas this agent hosts one of: give --listen too")
		}
		storePeers = strings.Split(p, ",")
		if c.Bool("store-join") && c.Bool("store-alone") {
			return cmdline.Usagef(c, "--store-join and --store-alone: a replica joins a running store, or recovers one alone, not both")
		}
		if err := replica.CheckPeers(storePeers); err != nil {
			return cmdline.Usagef(c, "--store-peers (MUSTER_STORE_PEERS): %s", err)
		}
	}
	if (c.Bool("store-join") || c.Bool("store-alone")) && len(storePeers) == 0 {
		return cmdline.Usagef(c, "--store-join and --store-alone are for a store replica: give --listen and --store-peers too")
	}
	if strings.Contains(storeAddr, ",") {
		joinReplicas = strings.Split(storeAddr, ",")
		if err := replica.CheckPeers(joinReplicas); err != nil {
			return cmdline.Usagef(c, "--store (MUSTER_STORE): %s", err)
		}
		storeAddr = joinReplicas[0]
	}
	gossip := gossipConfig(c, listen)
	if gossip != nil {
		gossip.NodeTimeout = nodeTimeout
	}
	if gossip != nil {
		if err := gossip.Check(); err != nil {
			return cmdline.Usagef(c, "%s", err)
		}
	}
	if listen == "" && storeAddr == "" && gossip == nil {
		listen = "127.0.0.1:29400"
	}
	if err := node.CheckHostOrJoin(listen, storeAddr); err != nil {
		return cmdline.Usagef(c, "%s", err)
	}
	if storeAddr != "" && c.IsSet("socket") {
		return cmdline.Usagef(c, "--socket serves a store this agent hosts (--listen); with --store, launchers on this machine use --cluster %s", storeAddr)
	}
	sec := security.Security{CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"), CAFile: c.String("tls-ca")}

	// SIGHUP (a closed terminal) stops the node gracefully too, as SIGTERM
	// does: by default it would kill the agent without stopping its jobs.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ncfg := node.Config{Logger: log, Listen: listen, Join: storeAddr, JoinReplicas: joinReplicas, StorePeers: storePeers,
		StoreJoining: c.Bool("store-join"), StoreAlone: c.Bool("store-alone"), Gossip: gossip, Security: sec, TokenFile: c.String("token-file"),
		Socket: c.String("socket"), SocketRequired: c.IsSet("socket"), SocketUsers: os.Geteuid() == 0, MetricsAddr: c.String("metrics-addr"), History: history}
	ncfg.Agent = agent.Config{NCCLVersion: ncclprobe.Self(), Name: c.String("name"), Addr: c.String("addr"), Rank: nodeRank, Environ: os.Environ(), RankLogs: kept,
		HealthCommand: c.String("health-check"), HealthTimeout: healthTimeout}
	if list := c.String("gpu-devices"); list != "" {
		if ncfg.Agent.GPUs, err = gpu.Parse(list); err != nil {
			return fmt.Errorf("--gpu-devices: %w", err)
		}
	} else if ncfg.Agent.GPUs, err = gpu.FromEnvironment(); err != nil {
		ncfg.Agent.GPUError = err.Error()
		log.Info("no gpus", zap.Error(err))
	}
	if ncfg.Agent.Fabric, err = fabricPath(ctx, c, log, c.String("gpu-devices") == "" && len(ncfg.Agent.GPUs) > 0); err != nil {
		return err
	}
	// Only a node that should have GPUs is unready without them.
	if file := gpu.DeviceFile("/dev"); file != "" {
		ncfg.GPUsExpected = file + " exists"
	}
	// The cluster token, and what the node is to host or join, before
	// systemd hears that the agent started.
	if err := ncfg.Resolve(ctx); err != nil {
		return err
	}
	// Under systemd (Type=notify) the unit is started once the agent has read
	// its configuration: a node waits for its store as long as the head is
	// down, and `systemctl start` must not wait with it. /readyz tells when
	// it takes jobs; the unit's status line says so too.
	sdNotify(log, daemon.SdNotifyReady+"\nSTATUS=joining the cluster: finding and registering with its store")
	n, err := node.Start(ctx, ncfg)
	if err != nil {
		return err
	}
	sdNotify(log, "STATUS=registered with the store: taking jobs")
	// A lost store does not end the agent: it keeps this node's jobs
	// running and registers again (agent/session.go). The store it hosts
	// failing does: no node or launcher could reach it any more.
	select {
	case <-ctx.Done():
		log.Info("agent stopping", zap.String("reason", "signal"))
		daemon.SdNotify(false, daemon.SdNotifyStopping)
		return n.Close(killTimeout)
	case err := <-n.Err():
		log.Error("agent stopping", zap.String("reason", "store failed"), zap.Error(err))
		daemon.SdNotify(false, daemon.SdNotifyStopping)
		return errors.Join(err, n.Close(killTimeout))
	}
}

// gossipConfig is the node's gossip, or nil: on with --join, --bind or
// --advertise, or a store hosted on an address other nodes can reach.
func gossipConfig(c *cli.Context, listen string) *node.Gossip {
	g := &node.Gossip{Bind: c.String("bind"), Advertise: c.String("advertise")}
	if j := c.String("join"); j != "" {
		g.Join = strings.Split(j, ",")
	}
	if host, _, err := net.SplitHostPort(listen); err == nil && !security.IsLoopback(host) {
		return g
	}
	if len(g.Join) == 0 && g.Bind == "" && g.Advertise == "" {
		return nil
	}
	return g
}

// sdNotify tells systemd, when it started the agent, of its state.
func sdNotify(log *zap.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("sd_notify failed", zap.Error(err))
	}
}
