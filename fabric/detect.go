package fabric

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// ScontrolTimeout bounds `scontrol show topology`: an agent that starts
// does not wait on a slow controller for more than this.
const ScontrolTimeout = 5 * time.Second

// Sources are where Detect looks for a node's path.
type Sources struct {
	// Getenv reads the environment (SLURM_JOB_ID, SLURMD_NODENAME).
	Getenv func(string) string
	// Hostname is the node's host name, for Slurm's node name when
	// SLURMD_NODENAME is unset.
	Hostname string
	// Scontrol returns `scontrol show topology`'s output; nil runs it.
	Scontrol func(ctx context.Context) ([]byte, error)
	// GPUFabric is the GPUs' NVLink fabric, as GPUFabricPath takes it; nil
	// or an empty cluster: none.
	GPUFabric func() (cluster [16]byte, clique uint32, err error)
}

// Detect finds the node's path when none was given: inside a Slurm
// allocation (SLURM_JOB_ID set) from Slurm's topology, else from the GPUs'
// NVLink fabric. It returns no path, and says why at debug level, where
// neither tells; from says where the path came from.
func Detect(ctx context.Context, log *zap.Logger, src Sources) (p Path, from string) {
	if src.Getenv != nil && src.Getenv("SLURM_JOB_ID") != "" {
		node := src.Getenv("SLURMD_NODENAME")
		if node == "" {
			node, _, _ = strings.Cut(src.Hostname, ".")
		}
		run := src.Scontrol
		if run == nil {
			run = func(ctx context.Context) ([]byte, error) { return ScontrolTopology(ctx, ScontrolTimeout) }
		}
		out, err := run(ctx)
		if err == nil {
			p, err = FromSlurmTopology(out, node)
		}
		if err == nil {
			return p, "scontrol show topology"
		}
		log.Info("no fabric path from Slurm's topology", zap.String("node", node), zap.Error(err))
	}
	if src.GPUFabric != nil {
		cluster, clique, err := src.GPUFabric()
		if err != nil {
			log.Debug("no fabric path from the GPUs", zap.Error(err))
			return nil, ""
		}
		if p := GPUFabricPath(cluster, clique); p != nil {
			return p, "NVML GPU fabric"
		}
	}
	return nil, ""
}

// GPUFabricPath is the path of a GPU in an NVLink fabric (a GB200 NVL72
// rack): fabric=CLUSTER-UUID,clique=ID; nil for a zero cluster UUID, a GPU
// in no fabric.
func GPUFabricPath(cluster [16]byte, clique uint32) Path {
	if cluster == [16]byte{} {
		return nil
	}
	h := hex.EncodeToString(cluster[:])
	uuid := fmt.Sprintf("%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:])
	return Path{{Name: "fabric", Value: uuid}, {Name: "clique", Value: fmt.Sprint(clique)}}
}
