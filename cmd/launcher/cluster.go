package main

import (
	"os"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/rendezvous"
)

// clusterFlags are how every subcommand reaches a cluster's store; required
// says the command has nothing to do without one.
func clusterFlags(required bool) []cli.Flag {
	usage := "the store's `HOST:PORT`; without it, run on this machine"
	if required {
		usage = "the store's `HOST:PORT` (required: this command asks a running cluster)"
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", EnvVars: []string{"MUSTER_CLUSTER"}, Usage: usage},
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"MUSTER_TOKEN_FILE"}, Usage: "file holding the cluster token"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"MUSTER_TLS_CA"}, Usage: "CA certificate that signed the store's certificate (turns TLS on)"},
	}
}

func clusterSecurity(c *cli.Context) (rendezvous.Security, error) {
	sec := rendezvous.Security{Token: os.Getenv("MUSTER_TOKEN"), CAFile: c.String("tls-ca")}
	if f := c.String("token-file"); f != "" {
		tok, err := rendezvous.ReadToken(f)
		if err != nil {
			return sec, err
		}
		sec.Token = tok
	}
	return sec, nil
}

// newLogger logs everything the embedded store and agent do to stderr with
// verbose, and nothing without: what a user must see, the launcher prints
// as plain lines.
func newLogger(verbose bool) (*zap.Logger, error) {
	if !verbose {
		return zap.NewNop(), nil
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(zapcore.DebugLevel)
	cfg.DisableStacktrace = true
	return cfg.Build()
}
