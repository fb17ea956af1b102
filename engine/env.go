// Package engine is what workers link: the worker-side view of a muster job,
// and run-time bindings to NCCL and CUDA (the unique ID layout is uniqueid's).
package engine

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/envprop"
)

// Worker is what a worker process learns from muster's environment.
type Worker struct {
	Rank           int         // RANK: global rank
	WorldSize      int         // WORLD_SIZE
	LocalRank      int         // LOCAL_RANK: rank on this node
	LocalWorldSize int         // LOCAL_WORLD_SIZE: workers on this node
	Device         int         // CUDA device ordinal inside this process
	VisibleDevices []string    // CUDA_VISIBLE_DEVICES, split; empty when unset
	UniqueID       uniqueid.ID // MUSTER_NCCL_UNIQUE_ID
}

// ErrNotUnderMuster says the process was not started by muster.
var ErrNotUnderMuster = errors.New("not started by muster: MUSTER_NCCL_UNIQUE_ID is not set; run it under `launcher run`")

// FromEnv reads the worker's view of its job from the process environment.
func FromEnv() (Worker, error) { return WorkerFromLookup(os.LookupEnv) }

// WorkerFromLookup reads the worker's view through lookup, so tests and
// tools can pass an environment other than the process's own.
func WorkerFromLookup(lookup func(string) (string, bool)) (Worker, error) {
	var w Worker
	idHex, ok := lookup(envprop.NCCLUniqueID)
	if !ok || idHex == "" {
		return w, ErrNotUnderMuster
	}
	id, err := uniqueid.Parse(strings.TrimSpace(idHex))
	if err != nil {
		return w, fmt.Errorf("MUSTER_NCCL_UNIQUE_ID: %w", err)
	}
	w.UniqueID = id

	if w.WorldSize, err = intVar(lookup, envprop.WorldSize, -1, 1); err != nil {
		return w, err
	}
	if w.Rank, err = intVar(lookup, envprop.Rank, -1, 0); err != nil {
		return w, err
	}
	if w.Rank >= w.WorldSize {
		return w, fmt.Errorf("RANK=%d: must be below WORLD_SIZE=%d", w.Rank, w.WorldSize)
	}
	if w.LocalRank, err = intVar(lookup, envprop.LocalRank, -1, 0); err != nil {
		return w, err
	}
	if w.LocalWorldSize, err = intVar(lookup, envprop.LocalWorldSize, w.WorldSize, 1); err != nil {
		return w, err
	}
	if w.LocalRank >= w.LocalWorldSize {
		return w, fmt.Errorf("LOCAL_RANK=%d: must be below LOCAL_WORLD_SIZE=%d", w.LocalRank, w.LocalWorldSize)
	}

	if v, ok := lookup(envprop.CUDAVisibleDevices); ok && strings.TrimSpace(v) != "" {
		for _, d := range strings.Split(v, ",") {
			w.VisibleDevices = append(w.VisibleDevices, strings.TrimSpace(d))
		}
	}
	w.Device, err = deviceOrdinal(lookup, w.LocalRank, w.VisibleDevices)
	return w, err
}

// deviceOrdinal finds the worker's GPU as an ordinal inside the process. The
// job's CUDA_VISIBLE_DEVICES list is the same for every local worker, so the
// worker's own GPU is the LOCAL_RANK-th in it, or, with several GPUs a worker
// (MUSTER_LOCAL_GPUS), the position of its first GPU in that list.
func deviceOrdinal(lookup func(string) (string, bool), localRank int, visible []string) (int, error) {
	if v, ok := lookup(envprop.LocalGPUs); ok && strings.TrimSpace(v) != "" {
		first := strings.TrimSpace(strings.Split(v, ",")[0])
		if len(visible) == 0 {
			// Nothing hidden: the physical index is the ordinal.
			n, err := strconv.Atoi(first)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("MUSTER_LOCAL_GPUS=%q: %q is not a device index and CUDA_VISIBLE_DEVICES is unset", v, first)
			}
			return n, nil
		}
		i := slices.Index(visible, first)
		if i < 0 {
			return 0, fmt.Errorf("MUSTER_LOCAL_GPUS=%q: %q is not in CUDA_VISIBLE_DEVICES=%q", v, first, strings.Join(visible, ","))
		}
		return i, nil
	}
	if len(visible) > 0 && localRank >= len(visible) {
		return 0, fmt.Errorf("LOCAL_RANK=%d: CUDA_VISIBLE_DEVICES=%q lists only %d devices", localRank, strings.Join(visible, ","), len(visible))
	}
	return localRank, nil
}

// intVar reads a decimal variable of at least min; def < 0 means required.
func intVar(lookup func(string) (string, bool), name string, def, min int) (int, error) {
	v, ok := lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		if def < 0 {
			return 0, fmt.Errorf("%s is not set", name)
		}
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not an integer", name, v)
	}
	if n < min {
		return 0, fmt.Errorf("%s=%d: must be at least %d", name, n, min)
	}
	return n, nil
}
