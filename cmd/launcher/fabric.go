package main

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/musterhq/muster/fabric"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/listing"
)

// doctorFabric fills in the fabric path an agent here would register: its
// MUSTER_TOPOLOGY (what agent.env gives --topology), else what Slurm's
// topology or the GPUs' NVLink fabric say.
func doctorFabric(ctx context.Context, d *listing.Doctor) {
	if v, ok := os.LookupEnv("MUSTER_TOPOLOGY"); ok {
		p, err := fabric.Parse(v)
		if err != nil {
			d.FabricError = "MUSTER_TOPOLOGY " + `"` + v + `": ` + err.Error()
			return
		}
		d.Fabric, d.FabricFrom = p.String(), "MUSTER_TOPOLOGY"
		return
	}
	host, _ := os.Hostname()
	p, from := fabric.Detect(ctx, zap.NewNop(), fabric.Sources{Getenv: os.Getenv, Hostname: host, GPUFabric: gpu.Fabric})
	d.Fabric, d.FabricFrom = p.String(), from
}
