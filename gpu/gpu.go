// Package gpu finds the node's NVIDIA GPUs through NVML, which is loaded at
// run time, so the binaries build and run on machines without a GPU.
package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one GPU as the node offers it to jobs.
type Device struct {
	// Index is NVML's index (PCI bus order), the number in CUDA_VISIBLE_DEVICES.
	Index       int
	UUID        string
	Name        string
	MemoryBytes uint64
}

// Discover lists the node's GPUs. An error says why none could be listed
// (no driver, no library); callers treat it as "no GPUs" and show the reason.
// When visible is non-empty (the node's own CUDA_VISIBLE_DEVICES), only those
// devices are offered.
func Discover(visible string) (devs []Device, err error) {
	// go-nvml panics on some broken installs; a node without GPUs must still run.
	defer func() {
		if r := recover(); r != nil {
			devs, err = nil, fmt.Errorf("nvml: %v", r)
		}
	}()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: %s", nvml.ErrorString(ret))
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: device count: %s", nvml.ErrorString(ret))
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: device %d: %s", i, nvml.ErrorString(ret))
		}
		dev := Device{Index: i}
		dev.UUID, _ = d.GetUUID()
		dev.Name, _ = d.GetName()
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			dev.MemoryBytes = mem.Total
		}
		devs = append(devs, dev)
	}
	return Filter(devs, visible)
}

// Filter keeps the devices a CUDA_VISIBLE_DEVICES value names, by index or
// UUID (or UUID prefix, as CUDA accepts). An empty value keeps all.
func Filter(devs []Device, visible string) ([]Device, error) {
	visible = strings.TrimSpace(visible)
	if visible == "" {
		return devs, nil
	}
	var out []Device
	seen := map[int]bool{}
	for _, tok := range strings.Split(visible, ",") {
		tok = strings.TrimSpace(tok)
		found := -1
		if i, err := strconv.Atoi(tok); err == nil {
			if i < 0 {
				break // CUDA stops at the first invalid entry
			}
			for j, d := range devs {
				if d.Index == i {
					found = j
				}
			}
		} else {
			for j, d := range devs {
				if tok != "" && strings.HasPrefix(d.UUID, tok) {
					found = j
				}
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%s: no GPU %q on this node", visible, tok)
		}
		if !seen[found] {
			seen[found] = true
			out = append(out, devs[found])
		}
	}
	return out, nil
}

// Parse reads a declared GPU list such as "0,1,2,3", for nodes whose GPUs are
// configured rather than discovered.
func Parse(list string) ([]Device, error) {
	var devs []Device
	seen := map[int]bool{}
	for _, tok := range strings.Split(list, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(tok))
		if err != nil || i < 0 || i > 1023 {
			return nil, fmt.Errorf("GPU list %q: %q is not a device index in 0..1023", list, tok)
		}
		if seen[i] {
			return nil, fmt.Errorf("GPU list %q: device %d appears twice", list, i)
		}
		seen[i] = true
		devs = append(devs, Device{Index: i, Name: "declared"})
	}
	return devs, nil
}

// DeviceFile names the first NVIDIA GPU device file (nvidia0, nvidia1...)
// in dev, or "" when there is none: a node that has one has a GPU to
// offer, whatever NVML says.
func DeviceFile(dev string) string {
	files, _ := filepath.Glob(filepath.Join(dev, "nvidia[0-9]*"))
	if len(files) == 0 {
		return ""
	}
	return files[0]
}

// FromEnvironment is Discover restricted by this process's CUDA_VISIBLE_DEVICES.
func FromEnvironment() ([]Device, error) {
	return Discover(os.Getenv("CUDA_VISIBLE_DEVICES"))
}
