package gpu

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The node's GPU health, checked before every round: each GPU the node
// offers is still there and answers NVML, has no uncorrectable ECC error
// and no row remapping pending or failed, and reported no critical XID
// error since the last check.

// NVML is what the health check asks of NVML, small enough for a test to
// stand a fake in for it.
type NVML interface {
	// Open starts a session; critical XID errors are collected from then on.
	Open() error
	Close()
	// Present is the UUID of each GPU NVML sees, by index.
	Present() (map[int]string, error)
	// Memory is one GPU's memory health.
	Memory(index int) (MemoryHealth, error)
	// XIDs are the critical XID errors since the last call, or since Open.
	XIDs() ([]XID, error)
}

// MemoryHealth is what NVML says of a GPU's memory.
type MemoryHealth struct {
	// UncorrectableECC counts uncorrectable ECC errors since the driver loaded.
	UncorrectableECC uint64
	// RemapPending: a row remapping waits for the GPU's reset.
	RemapPending bool
	// RemapFailed: a row could not be remapped.
	RemapFailed bool
}

// XID is a critical XID error a GPU reported.
type XID struct {
	Index int
	Code  uint64
}

// Checker checks the health of the GPUs a node offers. It keeps its NVML
// session open between checks, so that an XID error between two rounds is
// seen by the second. Safe for concurrent use.
type Checker struct {
	mu     sync.Mutex
	lib    NVML
	opened bool
	devs   []Device
}

// NewChecker checks devs through the machine's NVML.
func NewChecker(devs []Device) *Checker { return NewCheckerWith(devs, &nvmlLib{}) }

// NewCheckerWith checks devs through lib.
func NewCheckerWith(devs []Device, lib NVML) *Checker { return &Checker{lib: lib, devs: devs} }

// Open starts the NVML session now, when the node has GPUs found through
// NVML, so that an XID error before the first check is seen by it; Check
// opens it otherwise.
func (c *Checker) Open() error {
	if len(c.nvmlDevices()) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.openLocked()
}

func (c *Checker) openLocked() error {
	if c.opened {
		return nil
	}
	if err := c.lib.Open(); err != nil {
		return fmt.Errorf("NVML does not answer: %w", err)
	}
	c.opened = true
	return nil
}

// nvmlDevices are the devices NVML found (declared ones have no UUID).
func (c *Checker) nvmlDevices() []Device {
	var found []Device
	for _, d := range c.devs {
		if d.UUID != "" {
			found = append(found, d)
		}
	}
	return found
}

// Check checks the GPUs. A node without GPUs, or whose GPUs were declared
// (--gpu-devices) rather than found through NVML, passes with a note
// saying so; a failure names each problem found.
func (c *Checker) Check() (note string, err error) {
	if len(c.devs) == 0 {
		return "no GPUs", nil
	}
	found := c.nvmlDevices()
	if len(found) == 0 {
		return "declared GPUs, not checked through NVML", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.openLocked(); err != nil {
		return "", err
	}
	present, err := c.lib.Present()
	if err != nil {
		return "", fmt.Errorf("NVML does not list the GPUs: %w", err)
	}
	byUUID := map[string]int{}
	for i, u := range present {
		byUUID[u] = i
	}
	var problems []string
	index := map[int]Device{} // NVML's index now, for the XIDs
	for _, d := range found {
		i, ok := byUUID[d.UUID]
		if !ok {
			problems = append(problems, fmt.Sprintf("GPU %d (%s) is gone", d.Index, d.UUID))
			continue
		}
		index[i] = d
		m, err := c.lib.Memory(i)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("GPU %d does not answer NVML: %v", d.Index, err))
		case m.UncorrectableECC > 0:
			problems = append(problems, fmt.Sprintf("GPU %d has %d uncorrectable ECC errors", d.Index, m.UncorrectableECC))
		}
		if m.RemapPending {
			problems = append(problems, fmt.Sprintf("GPU %d has a row remapping pending (reset the GPU)", d.Index))
		}
		if m.RemapFailed {
			problems = append(problems, fmt.Sprintf("GPU %d failed to remap a row", d.Index))
		}
	}
	xids, err := c.lib.XIDs()
	if err != nil {
		problems = append(problems, fmt.Sprintf("NVML's XID events: %v", err))
	}
	for _, x := range xids {
		if d, ok := index[x.Index]; ok {
			problems = append(problems, fmt.Sprintf("GPU %d reported XID %d since the last check", d.Index, x.Code))
		}
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "; "))
	}
	return fmt.Sprintf("%d GPUs healthy", len(found)), nil
}

// Close ends the NVML session, if one was opened.
func (c *Checker) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened {
		c.lib.Close()
		c.opened = false
	}
}

// nvmlLib is NVML itself.
type nvmlLib struct {
	lib nvml.Interface
	set nvml.EventSet
}

func nvmlError(what string, ret nvml.Return) error {
	return fmt.Errorf("%s: %s", what, nvml.ErrorString(ret))
}

func (n *nvmlLib) Open() (err error) {
	// go-nvml panics on some broken installs.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("nvml: %v", r)
		}
	}()
	n.lib = nvml.New()
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		return nvmlError("init", ret)
	}
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		n.lib.Shutdown()
		return nvmlError("event set", ret)
	}
	n.set = set
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		n.Close()
		return nvmlError("device count", ret)
	}
	for i := range count {
		if d, ret := n.lib.DeviceGetHandleByIndex(i); ret == nvml.SUCCESS {
			// A GPU that cannot report XIDs (not supported) is checked otherwise.
			d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		}
	}
	return nil
}

func (n *nvmlLib) Close() {
	n.set.Free()
	n.lib.Shutdown()
}

func (n *nvmlLib) Present() (map[int]string, error) {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("device count", ret)
	}
	out := map[int]string{}
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // not present: the caller names it
		}
		if u, ret := d.GetUUID(); ret == nvml.SUCCESS {
			out[i] = u
		}
	}
	return out, nil
}

func (n *nvmlLib) Memory(index int) (MemoryHealth, error) {
	var m MemoryHealth
	d, ret := n.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return m, nvmlError("handle", ret)
	}
	ecc, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	switch ret {
	case nvml.SUCCESS:
		m.UncorrectableECC = ecc
	case nvml.ERROR_NOT_SUPPORTED: // no ECC on this GPU, or ECC off
	default:
		return m, nvmlError("ECC errors", ret)
	}
	_, _, pending, failed, ret := d.GetRemappedRows()
	switch ret {
	case nvml.SUCCESS:
		m.RemapPending, m.RemapFailed = pending, failed
	case nvml.ERROR_NOT_SUPPORTED: // before Ampere: no row remapping
	default:
		return m, nvmlError("remapped rows", ret)
	}
	return m, nil
}

// maxXIDs bounds the events one check drains.
const maxXIDs = 1024

func (n *nvmlLib) XIDs() ([]XID, error) {
	var out []XID
	for range maxXIDs {
		ev, ret := n.set.Wait(0)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			return out, nil
		default:
			return out, nvmlError("event wait", ret)
		}
		if ev.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		i, ret := ev.Device.GetIndex()
		if ret != nvml.SUCCESS {
			i = -1
		}
		out = append(out, XID{Index: i, Code: ev.EventData})
	}
	return out, nil
}
