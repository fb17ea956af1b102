// Command agent is muster's node daemon. It can host the rendezvous store
// (--listen) and runs this node's workers.
package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
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
			&cli.StringFlag{Name: "listen", Usage: "host the store on `HOST:PORT` (default 127.0.0.1:29400); every call over TCP needs the cluster token, and an address other than loopback also TLS"},
			&cli.StringFlag{Name: "store", EnvVars: []string{"MUSTER_STORE"}, Usage: "join the store at `HOST:PORT` (or unix:///PATH of its socket) instead of hosting one"},
			&cli.StringFlag{Name: "name", Usage: "this node's name (default: the host name)"},
			&cli.StringFlag{Name: "addr", Usage: "this node's `IP` for workers (MASTER_ADDR, NCCL root); default: the --listen host, or 127.0.0.1"},
			cmdline.Flag(nodeRank, "node-rank", nil, "explicit node `RANK`; nodes without one (-1) are ordered by name"),
			&cli.StringFlag{Name: "gpu-devices", Usage: "offer these GPUs (`LIST` of indices) instead of the ones NVML finds"},
			&cli.StringFlag{Name: "socket", Usage: "with --listen, also serve the store on the Unix socket `PATH` for launchers on this machine " +
				"(default: " + rendezvous.SystemSocket + " as root, where every local user may submit and their jobs run as them; " +
				"else $XDG_RUNTIME_DIR/muster/agent.sock, for this user only)"},
			&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "file holding the cluster token; with --listen it is " +
				"created (mode 0600) when missing (default: " + rendezvous.SystemTokenFile + " as root, else ~/.config/muster/token)"},
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

	listen, storeAddr := c.String("listen"), c.String("store")
	if listen == "" && storeAddr == "" {
		listen = "127.0.0.1:29400"
	}
	if listen != "" && storeAddr != "" {
		return cmdline.Usagef(c, "--listen and --store: give one (host the store, or join one)")
	}
	// The token given explicitly: MUSTER_TOKEN, or --token-file, which an
	// agent hosting the store creates below when it does not exist yet.
	tokenFile := c.String("token-file")
	_, envToken := os.LookupEnv(rendezvous.EnvToken)
	explicit := ""
	if envToken || (tokenFile != "" && (listen == "" || fileExists(tokenFile))) {
		if explicit, err = rendezvous.LoadToken(tokenFile); err != nil {
			return err
		}
	}
	sec := rendezvous.Security{Token: explicit, CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"), CAFile: c.String("tls-ca")}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr := c.String("addr")
	var store *rendezvous.Server
	var agentSec rendezvous.Security
	storeCA := sec.CAFile
	if listen != "" {
		ip, port, err := resolveListen(ctx, listen)
		if err != nil {
			return err
		}
		listenAddr := net.JoinHostPort(ip.String(), port)
		if err := rendezvous.CheckListen(listenAddr, sec); err != nil {
			return err
		}
		if sec.Token == "" {
			// Every call over TCP needs the token, loopback included: make one.
			file := tokenFile
			if file == "" {
				file = rendezvous.DefaultTokenFile()
			}
			tok, created, err := rendezvous.EnsureTokenFile(file)
			if err != nil {
				return err
			}
			sec.Token = tok
			log.Info("cluster token", zap.String("file", file), zap.Bool("created", created))
		}
		if addr == "" {
			addr = "127.0.0.1"
			if !ip.IsUnspecified() {
				addr = ip.String()
			}
		}
		if store, err = hostStore(ctx, c, log, listenAddr, addr, sec); err != nil {
			return err
		}
		defer store.Close()
		<-store.ReadyNotify()
		if sec.CertFile != "" && storeCA == "" {
			storeCA = sec.CertFile // workers trust the store's own certificate
		}
		if storeAddr = store.SocketAddr(); storeAddr == "" {
			// No socket: dial the store over loopback, with the token (and
			// TLS, trusting the store's CA or its certificate).
			_, port, _ := net.SplitHostPort(store.Addr())
			host := ip.String()
			if ip.IsUnspecified() {
				host = "127.0.0.1"
			}
			storeAddr = net.JoinHostPort(host, port)
			agentSec = rendezvous.Security{Token: sec.Token, TLS: sec.CertFile != "", CAFile: storeCA}
		}
	} else {
		storeAddr = rendezvous.NormalizeAddr(storeAddr)
		if sec.Token == "" && !rendezvous.IsUnixAddr(storeAddr) {
			if f := rendezvous.FindTokenFile(); f != "" {
				if sec.Token, err = rendezvous.ReadToken(f); err != nil {
					return err
				}
			}
		}
		agentSec = rendezvous.Security{Token: sec.Token, CAFile: sec.CAFile}
		if addr == "" {
			addr = "127.0.0.1"
		}
	}
	acfg := agent.Config{Logger: log, StoreAddr: storeAddr, Security: agentSec, StoreCA: storeCA, Name: c.String("name"), Addr: addr,
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
	// A lost store does not end the agent: it keeps this node's jobs
	// running and registers again (agent/session.go).
	<-ctx.Done()
	log.Info("agent stopping", zap.String("reason", "signal"))
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	return a.Close(killTimeout)
}

// hostStore starts the store on listenAddr and, for launchers on this
// machine, on a Unix socket. A store running as root lets every local user
// use its socket and runs their jobs as them. When the default socket cannot
// be served (another agent holds it), the store goes on without one.
func hostStore(ctx context.Context, c *cli.Context, log *zap.Logger, listenAddr, nodeAddr string, sec rendezvous.Security) (*rendezvous.Server, error) {
	lis, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("store: listen on %s: %w", listenAddr, err)
	}
	advertise := lis.Addr().String()
	host, port, _ := net.SplitHostPort(advertise)
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		// Workers reach the store at this node's address.
		advertise = net.JoinHostPort(nodeAddr, port)
	}
	cfg := rendezvous.Config{Logger: log, Listener: lis, AdvertiseAddr: advertise, Security: sec,
		Socket: c.String("socket"), SocketUsers: os.Geteuid() == 0}
	if cfg.Socket == "" {
		cfg.Socket = rendezvous.DefaultSocket()
	}
	store, err := rendezvous.Start(ctx, cfg)
	if err == nil || c.IsSet("socket") {
		return store, err
	}
	log.Warn("serving no socket for local launchers", zap.String("socket", cfg.Socket), zap.Error(err))
	// Start closed the listener; take the same port again.
	if cfg.Listener, err = net.Listen("tcp", net.JoinHostPort(lis.Addr().(*net.TCPAddr).IP.String(), port)); err != nil {
		return nil, fmt.Errorf("store: listen on %s: %w", listenAddr, err)
	}
	cfg.Socket = ""
	return rendezvous.Start(ctx, cfg)
}

// resolveListen turns --listen HOST:PORT into an IP address, resolving a
// host name (localhost) and preferring IPv4. An empty host listens on every
// address.
func resolveListen(ctx context.Context, listen string) (netip.Addr, string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("--listen %q: want HOST:PORT: %w", listen, err)
	}
	if host == "" {
		return netip.IPv4Unspecified(), port, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, port, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, "", fmt.Errorf("--listen %q: cannot resolve %s: %v", listen, host, err)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), port, nil
		}
	}
	return ips[0], port, nil
}

func fileExists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}
