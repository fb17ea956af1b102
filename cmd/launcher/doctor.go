package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/ncclnet"
	"github.com/musterhq/muster/platform"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "show the NCCL network settings muster would give workers on this node, and why",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "master", Usage: "the job's master address or host name", EnvVars: []string{"MASTER_ADDR"}},
			&cli.StringFlag{Name: "nccl-version", Usage: "assume this NCCL version (e.g. 2.20.5) instead of the loaded library's"},
			&cli.StringFlag{Name: "sysfs", Value: "/sys", Usage: "where sysfs is mounted", Hidden: true},
		},
		Action: doctor,
	}
}

func doctor(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit("doctor takes no arguments", 2)
	}
	w := c.App.Writer
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
		fmt.Fprintf(w, "master:        %s\n", opts.MasterAddr)
	} else {
		fmt.Fprintln(w, "master:        unknown (give --master or MASTER_ADDR)")
	}

	if v := c.String("nccl-version"); v != "" {
		code, err := ncclnet.ParseVersion(v)
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		opts.NCCLVersion = code
		fmt.Fprintf(w, "NCCL version:  %s (from --nccl-version)\n", v)
	} else if code, err := engine.LibraryNCCLVersion(); errors.Is(err, engine.ErrLibraryNotFound) {
		fmt.Fprintf(w, "NCCL version:  unknown (library not loaded: not found; %s names its path)\n", engine.EnvNCCLLibrary)
	} else if err != nil {
		first, _, _ := strings.Cut(err.Error(), "\n")
		fmt.Fprintf(w, "NCCL version:  unknown (library not loaded: %s)\n", first)
	} else {
		opts.NCCLVersion = code
		fmt.Fprintf(w, "NCCL version:  %s\n", engine.VersionString(code))
	}

	net, err := ncclnet.Detect(opts)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	fmt.Fprintln(w, "\ndetected (set only where you did not set the variable):")
	for _, kv := range net.Vars() {
		v := kv[1]
		if v == "" {
			v = "not set"
		}
		fmt.Fprintf(w, "  %-20s %s\n", kv[0], v)
	}
	fmt.Fprintln(w, "\nwhy:")
	for _, r := range net.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}

	fmt.Fprintln(w, "\nyour NCCL_* variables (these win over detection):")
	if len(opts.UserEnv) == 0 {
		fmt.Fprintln(w, "  none")
	}
	names := make([]string, 0, len(opts.UserEnv))
	for k := range opts.UserEnv {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "  %s=%s\n", k, opts.UserEnv[k])
	}

	// What the platform says is advice here: a bad value is shown, not fatal.
	if p, err := platform.DetectFrom(platform.OSSources()); err != nil {
		fmt.Fprintf(w, "\nplatform: %s\n", err)
	} else {
		fmt.Fprintln(w, "\nplatform:")
		for _, line := range p.Describe() {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	return nil
}
