package pmi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// Bounds on what one connection and one job (on this node) may store.
const (
	maxPutsPerConn = 1 << 14
	maxPutsPerJob  = 1 << 20
	maxNodeAttrs   = 1 << 10
)

// Job is one job's PMI world as this node sees it. Fill the exported fields,
// then call Serve once per local rank, concurrently; do not copy a Job after
// that.
type Job struct {
	KVSName string // answered to get_my_kvsname and job-getid, e.g. "muster-<jobid>"
	Size    int    // world size
	AppNum  int
	Mapping string // PMI_process_mapping value; see ProcessMapping
	Local   int    // ranks served on this node: the node barrier waits for all of them
	Backend Backend
	Logger  *zap.Logger

	mu      sync.Mutex
	barrier *nodeBarrier // the barrier local ranks are entering now
	seq     int          // number of the next upstream barrier
	puts    int
	attrs   map[string]string // PMI-2 node attributes
	attrSet chan struct{}     // closed and replaced when attrs changes
}

// Backend is what crosses nodes: the job's KV and one barrier per node, as
// MPICH's Hydra proxy sends one upstream barrier per node.
type Backend interface {
	Put(ctx context.Context, key string, value []byte) error
	// Get reports false when key is not set.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	// Barrier returns once every node of the job entered barrier number seq
	// (0, 1, …); puts made before it are visible to Get on every node after.
	Barrier(ctx context.Context, seq int) error
}

// Result is how one rank's connection ended.
type Result struct {
	Rank      int  // -1 when the rank never said (PMI_PORT without initack)
	Finalized bool // sent finalize; a close after it is a clean end
	Aborted   bool // sent abort: the job must stop with ExitCode
	ExitCode  int
	Message   string // names the rank, for the job's failure summary
	Spoke     bool   // sent a command at all: a program without PMI never does
	Err       error  // closed before finalize, bad input, or ctx ended
}

// ProcessMapping is PMI_process_mapping for nnodes nodes of perNode ranks,
// numbered in blocks: node i holds ranks i*perNode … (i+1)*perNode-1.
func ProcessMapping(nnodes, perNode int) string {
	return fmt.Sprintf("(vector,(0,%d,%d))", nnodes, perNode)
}

func (j *Job) check() error {
	switch {
	case j.KVSName == "" || len(j.KVSName) > maxKVSName || strings.ContainsAny(j.KVSName, " ;\n\\"):
		return fmt.Errorf("pmi: bad kvs name %q", j.KVSName)
	case j.Size < 1:
		return fmt.Errorf("pmi: size %d", j.Size)
	case j.Local < 1 || j.Local > j.Size:
		return fmt.Errorf("pmi: %d local ranks of %d", j.Local, j.Size)
	case j.Backend == nil:
		return errors.New("pmi: no backend")
	}
	return nil
}

func (j *Job) logger() *zap.Logger {
	if j.Logger == nil {
		return zap.NewNop()
	}
	return j.Logger
}

// nodeBarrier is one node-local barrier: done closes once the upstream
// barrier returned, with err its outcome.
type nodeBarrier struct {
	entered int
	done    chan struct{}
	err     error
}

// enterBarrier waits until all Local ranks entered and the one upstream
// barrier for this node returned. The last rank to enter calls it.
func (j *Job) enterBarrier(ctx context.Context) error {
	j.mu.Lock()
	b := j.barrier
	if b == nil {
		b = &nodeBarrier{done: make(chan struct{})}
		j.barrier = b
	}
	b.entered++
	last := b.entered == j.Local
	seq := j.seq
	if last {
		// The next rank to enter starts the next barrier.
		j.barrier = nil
		j.seq++
	}
	j.mu.Unlock()
	if last {
		b.err = j.Backend.Barrier(ctx, seq)
		if b.err != nil {
			b.err = fmt.Errorf("barrier %d: %w", seq, b.err)
		}
		close(b.done)
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the node's ranks at barrier %d: %w", seq, ctx.Err())
	}
}

// countPut admits one more put by a connection that made n before.
func (j *Job) countPut(n int) error {
	if n >= maxPutsPerConn {
		return fmt.Errorf("more than %d puts by one rank", maxPutsPerConn)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.puts >= maxPutsPerJob {
		return fmt.Errorf("more than %d puts by this node's ranks", maxPutsPerJob)
	}
	j.puts++
	return nil
}

func (j *Job) putNodeAttr(key, value string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.attrs == nil {
		j.attrs = map[string]string{}
	}
	if _, ok := j.attrs[key]; !ok && len(j.attrs) >= maxNodeAttrs {
		return fmt.Errorf("more than %d node attributes", maxNodeAttrs)
	}
	j.attrs[key] = value
	if j.attrSet != nil {
		close(j.attrSet)
		j.attrSet = nil
	}
	return nil
}

// nodeAttr returns key's node attribute; with wait it blocks until another
// local rank puts it, or ctx ends.
func (j *Job) nodeAttr(ctx context.Context, key string, wait bool) (string, bool, error) {
	for {
		j.mu.Lock()
		v, ok := j.attrs[key]
		if ok || !wait {
			j.mu.Unlock()
			return v, ok, nil
		}
		if j.attrSet == nil {
			j.attrSet = make(chan struct{})
		}
		set := j.attrSet
		j.mu.Unlock()
		select {
		case <-set:
		case <-ctx.Done():
			return "", false, fmt.Errorf("waiting for node attribute %q: %w", key, ctx.Err())
		}
	}
}

// jobAttr answers what the job itself knows, without the backend.
func (j *Job) jobAttr(key string) (string, bool) {
	switch key {
	case "PMI_process_mapping":
		return j.Mapping, j.Mapping != ""
	case "universeSize":
		return fmt.Sprint(j.Size), true
	}
	return "", false
}

// checkKV bounds a key and a value as get_maxes said.
func checkKV(key, value string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case len(key) > maxKey:
		return fmt.Errorf("key of %d bytes, more than %d", len(key), maxKey)
	case len(value) > maxValue:
		return fmt.Errorf("value of %d bytes, more than %d", len(value), maxValue)
	}
	return nil
}
