package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/fabric"
	"github.com/musterhq/muster/gpu"
)

// topologyFlag is --topology, agent's and agent run's.
func topologyFlag() cli.Flag {
	return &cli.StringFlag{Name: "topology", EnvVars: []string{"MUSTER_TOPOLOGY"}, Usage: "this node's place in the network, widest level first " +
		"(`LEVEL=VALUE,...`: block=b1,switch=s3; at most 8 levels of letters, digits, '.', '_', '-', ':'); consecutive node ranks go to nodes of one switch. " +
		"Default: inside a Slurm allocation its topology (scontrol show topology), else the GPUs' NVLink fabric, else none"}
}

// fabricPath is the node's --topology, else what Slurm's topology or the
// GPUs' NVLink fabric say (nvmlGPUs: NVML found the node's GPUs), else
// none.
func fabricPath(ctx context.Context, c *cli.Context, log *zap.Logger, nvmlGPUs bool) (fabric.Path, error) {
	if c.IsSet("topology") {
		p, err := fabric.Parse(c.String("topology"))
		if err != nil {
			return nil, cmdline.Usagef(c, "--topology (MUSTER_TOPOLOGY) %q: %s", c.String("topology"), err)
		}
		return p, nil
	}
	host, _ := os.Hostname()
	src := fabric.Sources{Getenv: os.Getenv, Hostname: host}
	if nvmlGPUs {
		src.GPUFabric = gpu.Fabric
	}
	p, from := fabric.Detect(ctx, log, src)
	if p != nil {
		log.Info("fabric path", zap.Stringer("path", p), zap.String("from", from))
	}
	return p, nil
}
