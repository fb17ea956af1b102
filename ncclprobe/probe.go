// Package ncclprobe reads the NCCL library's version in a short child
// process of the agent's own binary: the long-lived node daemon never
// loads a worker library (its constructors, its threads, a crash in it).
package ncclprobe

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Arg is the hidden command the child runs; env marks it as asked for, so
// that no mistyped command line runs it.
const (
	Arg = "__muster_nccl_version"
	env = "MUSTER_NCCL_PROBE=1"
)

// timeout bounds the child: loading NCCL reads a few files.
const timeout = 10 * time.Second

// RunIfRequested answers the probe and exits when this process is the
// child; otherwise it returns at once. A binary that runs agents calls it
// first in main, with what loads NCCL and reads its version.
func RunIfRequested(version func() (int, error)) {
	if len(os.Args) != 2 || os.Args[1] != Arg || os.Getenv("MUSTER_NCCL_PROBE") != "1" {
		return
	}
	v, err := version()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(v)
	os.Exit(0)
}

// Self returns a probe that runs this binary as the child.
func Self() func() (int, error) {
	return func() (int, error) {
		exe, err := os.Executable()
		if err != nil {
			return 0, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return Version(ctx, exe)
	}
}

// Version runs exe as the child and returns the NCCL version code it
// printed (22809 for 2.28.9).
func Version(ctx context.Context, exe string) (int, error) {
	cmd := exec.CommandContext(ctx, exe, Arg)
	cmd.Env = append(os.Environ(), env)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("nccl version: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || v <= 0 || v > 1_000_000 {
		return 0, fmt.Errorf("nccl version: %q is no version code", strings.TrimSpace(string(out)))
	}
	return v, nil
}
