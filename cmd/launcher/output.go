package main

import (
	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/listing"
)

// outputFlag is -o, how a listing command prints; def is its default, ""
// for a command whose own text is the default (hostfile, hostlist).
func outputFlag(def, usage string) cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: def,
		Usage: usage + " (`FORMAT`: " + listing.FormatNames() + ")"}
}

// outputFormat is -o's format; a bad value is a usage error naming the flag.
func outputFormat(c *cli.Context) (listing.Format, error) {
	f, err := listing.ParseFormat(c.String("output"))
	if err != nil {
		return "", cmdline.Usagef(c, "%s", err)
	}
	return f, nil
}
