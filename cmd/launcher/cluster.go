package main

import (
	"fmt"
	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"net"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/logging"
	"github.com/musterhq/muster/security"
)

// clusterFlags are how every subcommand reaches a cluster's store; required
// says the command has nothing to do without one.
func clusterFlags(required bool) []cli.Flag {
	usage := "the store's `HOST:PORT`, or unix:///PATH of an agent's socket; without it, the agent serving " +
		security.SystemSocket + " (or this user's own agent) when one runs here, else this machine alone"
	if required {
		usage = "the store's `HOST:PORT`, or unix:///PATH of an agent's socket (required unless an agent serves " +
			security.SystemSocket + " or this user's own socket: this command asks a running cluster)"
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", EnvVars: []string{"MUSTER_CLUSTER"}, Usage: usage},
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "file holding the cluster token " +
			"(default: ~/.config/muster/token or " + security.SystemTokenFile + ", whichever this user can read)"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"MUSTER_TLS_CA"}, Usage: "CA certificate that signed the store's certificate (turns TLS on)"},
	}
}

// clusterAddr is the store to use: --cluster, else an agent serving a
// socket on this machine, else "".
func clusterAddr(c *cli.Context) (string, error) {
	if addr := c.String("cluster"); addr != "" {
		addr = security.NormalizeAddr(addr)
		if err := security.CheckAddr(addr); err != nil {
			return "", cmdline.Usagef(c, "--cluster %v", err)
		}
		return addr, nil
	}
	return security.FindLocalAgent(), nil
}

// clusterSecurity is how to authenticate to addr. On a Unix socket the
// kernel names the caller; over TCP the cluster token does: MUSTER_TOKEN,
// --token-file, or a default token file this user can read.
func clusterSecurity(c *cli.Context, addr string) (security.Security, error) {
	sec := security.Security{CAFile: c.String("tls-ca")}
	if security.IsUnixAddr(addr) {
		return sec, nil
	}
	tok, _, err := security.ResolveToken(security.TokenSource{File: c.String("token-file"), Find: true})
	if err != nil {
		return sec, err
	}
	sec.Token = tok
	if host, _, err := net.SplitHostPort(addr); err == nil && tok != "" && sec.CAFile == "" && !security.IsLoopback(host) {
		return sec, fmt.Errorf("--cluster %s: the cluster token is never sent in clear text over a network: give --tls-ca (the CA of the store's certificate)", addr)
	}
	return sec, nil
}

// newLogger logs everything the embedded store and agent do to stderr with
// verbose, and nothing without: what a user must see, the launcher prints
// as plain lines.
func newLogger(verbose bool) (*zap.Logger, error) {
	return logging.New(logging.Config{Quiet: true, Console: true, Verbose: verbose})
}
