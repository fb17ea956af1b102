package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Fabric reads the NVLink fabric the node's GPUs belong to (a GB200 NVL72
// rack's): the cluster UUID and clique ID of the first GPU whose fabric
// registration completed with a cluster UUID. An error says why there is
// none: no NVML, GPUs without a fabric, a registration not completed.
func Fabric() (cluster [16]byte, clique uint32, err error) {
	// go-nvml panics on some broken installs; a node without GPUs must still run.
	defer func() {
		if r := recover(); r != nil {
			cluster, clique, err = [16]byte{}, 0, fmt.Errorf("nvml: %v", r)
		}
	}()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return cluster, 0, fmt.Errorf("nvml: %s", nvml.ErrorString(ret))
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return cluster, 0, fmt.Errorf("nvml: device count: %s", nvml.ErrorString(ret))
	}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		info, ret := d.GetGpuFabricInfo()
		if ret != nvml.SUCCESS || info.State != nvml.GPU_FABRIC_STATE_COMPLETED || nvml.Return(info.Status) != nvml.SUCCESS {
			continue
		}
		if info.ClusterUuid != [16]byte{} {
			return info.ClusterUuid, info.CliqueId, nil
		}
	}
	return cluster, 0, errors.New("nvml: no GPU in a registered NVLink fabric")
}
