package main

import (
	"errors"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/launch"
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
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "`FILE` holding the cluster token " +
			"(default: ~/.config/muster/token or " + security.SystemTokenFile + ", whichever this user can read)"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"MUSTER_TLS_CA"}, Usage: "`FILE` of the CA certificate that signed the store's certificate (turns TLS on)"},
	}
}

// clusterAddrs is the store to use: --cluster (one address, or a
// replicated store's replicas), else an agent serving a socket on this
// machine, else none.
func clusterAddrs(c *cli.Context) ([]string, error) {
	addrs, err := launch.ClusterAddrs(given(c, "cluster"), security.FindLocalAgent)
	return addrs, usageError(c, err)
}

// given is flag name's value where the command line gave it: on this command
// or on one it is under (launcher nodes --cluster X cordon NODE), whose own
// flag urfave/cli would otherwise hide behind this command's unset one.
func given(c *cli.Context, name string) string {
	for _, cc := range c.Lineage() {
		if cc.Command != nil && cc.IsSet(name) {
			return cc.String(name)
		}
	}
	return c.String(name)
}

// clusterSecurity is how to authenticate to addr (launch.ClusterSecurity).
func clusterSecurity(c *cli.Context, addr string) (security.Security, error) {
	return launch.ClusterSecurity(addr, given(c, "token-file"), given(c, "tls-ca"))
}

// usageError turns launch's usage errors into the command line's, and
// others into exit code 1.
func usageError(c *cli.Context, err error) error {
	var u *launch.UsageError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &u):
		return cmdline.Usagef(c, "%s", err)
	}
	return cli.Exit(err.Error(), 1)
}

// newLogger logs everything the embedded store and agent do to stderr with
// verbose, and nothing without: what a user must see, the launcher prints
// as plain lines.
func newLogger(verbose bool) (*zap.Logger, error) {
	return logging.New(logging.Config{Quiet: true, Console: true, Verbose: verbose})
}
