// Command agent is muster's node daemon. It can host the rendezvous store
// (--listen) and runs this node's workers.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/supervise"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/rendezvous"
)

func main() {
	// A job's shim is this binary started again: it must not run main.
	supervise.RunShimIfRequested()
	nodeRank := cmdline.NewCount(-1, -1, rendezvous.MaxNodes-1)
	killTimeout := cmdline.NewDuration(10 * time.Second)
	app := &cli.App{
		Name:      "agent",
		Usage:     "run this node's muster agent, and the cluster's store with --listen",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "host the store on `HOST:PORT` (loopback unless a token is set)"},
			&cli.StringFlag{Name: "store", EnvVars: []string{"MUSTER_STORE"}, Usage: "join the store at `HOST:PORT` instead of hosting one"},
			&cli.StringFlag{Name: "name", Usage: "this node's name (default: the host name)"},
			&cli.StringFlag{Name: "addr", Usage: "this node's `IP` for workers (MASTER_ADDR, NCCL root); default: the --listen host, or 127.0.0.1"},
			cmdline.Flag(nodeRank, "node-rank", nil, "explicit node `RANK`; nodes without one (-1) are ordered by name"),
			&cli.StringFlag{Name: "gpu-devices", Usage: "offer these GPUs (`LIST` of indices) instead of the ones NVML finds"},
			&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "file holding the cluster token"},
			&cli.StringFlag{Name: "tls-cert", Usage: "the store's TLS certificate"},
			&cli.StringFlag{Name: "tls-key", Usage: "the store's TLS key"},
			&cli.StringFlag{Name: "tls-ca", Usage: "CA certificate that signed the store's certificate"},
			cmdline.Flag(killTimeout, "kill-timeout", nil, "grace for workers when the agent stops (`DURATION`: 30s, 2m, or seconds)"),
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}},
		},
		Action: func(c *cli.Context) error { return runAgent(c, nodeRank.Int32(), killTimeout.Value()) },
	}
	os.Exit(cmdline.Run(app, os.Args))
}

func runAgent(c *cli.Context, nodeRank int32, killTimeout time.Duration) error {
	if c.NArg() > 0 {
		return cmdline.Usagef(c, "unexpected argument %q", c.Args().First())
	}
	level := zapcore.InfoLevel
	if c.Bool("verbose") {
		level = zapcore.DebugLevel
	}
	zcfg := zap.NewProductionConfig()
	zcfg.Level = zap.NewAtomicLevelAt(level)
	log, err := zcfg.Build()
	if err != nil {
		return err
	}
	defer log.Sync()

	sec := rendezvous.Security{Token: os.Getenv("MUSTER_TOKEN"), CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"), CAFile: c.String("tls-ca")}
	if f := c.String("token-file"); f != "" {
		if sec.Token, err = rendezvous.ReadToken(f); err != nil {
			return err
		}
	}
	listen, storeAddr := c.String("listen"), c.String("store")
	if listen == "" && storeAddr == "" {
		listen = "127.0.0.1:29400"
	}
	if listen != "" && storeAddr != "" {
		return cmdline.Usagef(c, "--listen and --store: give one (host the store, or join one)")
	}
	addr := c.String("addr")
	if addr == "" {
		addr = "127.0.0.1"
		if host, _, err := net.SplitHostPort(listen); err == nil && host != "" && host != "0.0.0.0" && host != "::" {
			addr = host
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var store *rendezvous.Server
	if listen != "" {
		if store, err = rendezvous.Start(ctx, rendezvous.Config{Logger: log, ListenAddr: listen, Security: sec}); err != nil {
			return err
		}
		defer store.Close()
		<-store.ReadyNotify()
		storeAddr = store.Addr()
	}

	agentSec := sec
	if store != nil && sec.CertFile != "" {
		// This agent dials its own store: trust the store's CA, or its certificate.
		agentSec.TLS, agentSec.CAFile = true, sec.CAFile
		if agentSec.CAFile == "" {
			agentSec.CAFile = sec.CertFile
		}
	}
	acfg := agent.Config{Logger: log, StoreAddr: storeAddr, Security: agentSec, Name: c.String("name"), Addr: addr,
		Rank: nodeRank, Environ: os.Environ()}
	if list := c.String("gpu-devices"); list != "" {
		if acfg.GPUs, err = gpu.Parse(list); err != nil {
			return fmt.Errorf("--gpu-devices: %w", err)
		}
	} else if acfg.GPUs, err = gpu.FromEnvironment(); err != nil {
		acfg.GPUError = err.Error()
		log.Info("no gpus", zap.Error(err))
	}
	a, err := agent.Start(ctx, acfg)
	if err != nil {
		return err
	}
	<-a.ReadyNotify()
	// Under systemd (Type=notify) the unit is started once jobs can be taken.
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify failed", zap.Error(err))
	}
	select {
	case <-ctx.Done():
		log.Info("agent stopping", zap.String("reason", "signal"))
		daemon.SdNotify(false, daemon.SdNotifyStopping)
	case err := <-a.Err():
		log.Error("agent lost its store", zap.Error(err))
	}
	return a.Close(killTimeout)
}
