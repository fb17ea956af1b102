package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/listing"
	"github.com/musterhq/muster/ncclnet"
	"github.com/musterhq/muster/platform"
	"github.com/musterhq/muster/topology"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "show the NCCL network settings muster would give workers on this node, and why, and the node's topology",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "master", Usage: "the job's master `ADDR` or host name", EnvVars: []string{"MASTER_ADDR"}},
			&cli.StringFlag{Name: "nccl-version", Usage: "assume this NCCL `VERSION` (e.g. 2.20.5) instead of the loaded library's"},
			outputFlag(string(listing.Table), "print the report as text or as a Doctor object"),
			&cli.StringFlag{Name: "sysfs", Value: "/sys", Usage: "where sysfs is mounted", Hidden: true},
		},
		Action: doctor,
	}
}

func doctor(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit("doctor takes no arguments", 2)
	}
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	d := listing.NewDoctor()
	opts := ncclnet.Options{SysRoot: c.String("sysfs"), UserEnv: ncclnet.UserVars(os.Environ())}

	if host := c.String("master"); host != "" {
		addr, err := netip.ParseAddr(host)
		if err != nil {
			addrs, lerr := net.DefaultResolver.LookupNetIP(c.Context, "ip", host)
			if lerr != nil || len(addrs) == 0 {
				return cli.Exit(fmt.Sprintf("master %q: not an address, and it does not resolve: %v", host, lerr), 2)
			}
			addr = addrs[0]
		}
		opts.MasterAddr = addr.Unmap()
		master := opts.MasterAddr.String()
		d.Master = &master
	}

	if v := c.String("nccl-version"); v != "" {
		code, err := ncclnet.ParseVersion(v)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		opts.NCCLVersion = code
		d.NCCLVersion, d.NCCLVersionFrom = v, "flag"
	} else if code, err := engine.LibraryNCCLVersion(); errors.Is(err, engine.ErrLibraryNotFound) {
		d.NCCLLibraryError = "not found; " + engine.EnvNCCLLibrary + " names its path"
	} else if err != nil {
		d.NCCLLibraryError, _, _ = strings.Cut(err.Error(), "\n")
	} else {
		opts.NCCLVersion = code
		d.NCCLVersion, d.NCCLVersionFrom = engine.VersionString(code), "library"
	}

	net, err := ncclnet.Detect(opts)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	for _, kv := range net.Vars() {
		d.Detected = append(d.Detected, listing.Variable{Name: kv[0], Value: kv[1]})
	}
	d.Reasons = append(d.Reasons, net.Reasons...)
	names := make([]string, 0, len(opts.UserEnv))
	for k := range opts.UserEnv {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		d.UserVariables = append(d.UserVariables, listing.Variable{Name: k, Value: opts.UserEnv[k]})
	}

	// What the platform says is advice here: a bad value is shown, not fatal.
	if p, err := platform.DetectFrom(platform.OSSources()); err != nil {
		d.PlatformError = err.Error()
	} else {
		d.Platform = append(d.Platform, p.Describe()...)
	}
	// The topology is read from the root above sysfs, as an agent here
	// reads it: sys/ and proc/self/.
	d.Topology = listing.TopologyOf(topology.Read(filepath.Dir(filepath.Clean(c.String("sysfs")))).Proto())
	doctorFabric(c.Context, &d)
	if err := listing.WriteDoctor(c.App.Writer, f, d); err != nil {
		return cli.Exit("doctor: "+err.Error(), 1)
	}
	return nil
}
