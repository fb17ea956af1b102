// Package embedded is the launcher's embedded default: a store and an agent
// for this machine, in the launcher's process. It starts them itself rather
// than through package node, so that the launcher carries none of what only
// the agent daemon needs (gossip, Prometheus metrics), whose package
// initialisation every job's start would pay.
package embedded

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/supervise"
)

// Embedded is a store and an agent for this machine, in this process. They
// talk over the same gRPC API a cluster uses, on a Unix socket in a private
// directory: no other user can reach it, and the store also checks each
// caller's peer credentials. Workers reach it there too (MUSTER_STORE_ADDR).
// The job directories are there too, where no other user can put anything.
type Embedded struct {
	Store *storeserver.Server
	Agent *agent.Agent
	dir   string
	spare *supervise.Spare // the shim started ahead, until the agent owns it
	swept chan struct{}    // closed once stale socket directories are removed
	errc  chan error
	once  sync.Once
	err   error // Close's
}

// sweepWait bounds Close's wait for the removal of stale socket
// directories: each costs a dial of at most a second.
const sweepWait = 2 * time.Second

// Config configures the embedded default.
type Config struct {
	Logger *zap.Logger
	// NCCLVersion: see agent.Config.
	NCCLVersion func() (int, error)
	// DiscoverGPUs asks NVML for the machine's GPUs; jobs without GPUs skip it.
	DiscoverGPUs bool
	// GPUs, when set, declares the GPUs instead of discovering them.
	GPUs []gpu.Device
}

// privateDir makes a directory only this user can enter, short enough for
// a socket path, in parent.
func privateDir(parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, socketDirPrefix)
	if err != nil {
		return "", fmt.Errorf("embedded store: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("embedded store: %w", err)
	}
	return dir, nil
}

const socketDirPrefix = "muster-sock-"

// removeStaleDirs removes this user's socket directories in parent whose
// store no longer answers. A directory younger than a few seconds may be a
// launcher's that has not listened yet, and stays.
func removeStaleDirs(parent string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, socketDirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < 10*time.Second {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if c, err := net.DialTimeout("unix", filepath.Join(dir, "store.sock"), time.Second); err == nil {
			c.Close()
			continue
		}
		os.RemoveAll(dir)
	}
}

// Start starts the store on a Unix socket in a private directory and
// registers a local agent with it. ctx bounds the start only. A failed
// start undoes what it made.
func Start(ctx context.Context, cfg Config) (_ *Embedded, err error) {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	parent := os.TempDir()
	if len(parent) > 64 {
		parent = "/tmp"
	}
	e := &Embedded{swept: make(chan struct{}), errc: make(chan error, 1)}
	// Directories that launchers killed before they could clean up left
	// behind go while the store and the agent start; Close waits for it.
	go func() {
		defer close(e.swept)
		removeStaleDirs(parent)
	}()
	defer func() {
		if err != nil {
			e.Close(0)
		}
	}()
	// The job's shim starts now, while the store and the agent do: a new
	// process's exec and start-up are a third of a small job's time.
	if e.spare, err = supervise.StartSpare(); err != nil {
		return nil, err
	}
	if e.dir, err = privateDir(parent); err != nil {
		return nil, err
	}
	if e.Store, err = storeserver.Start(ctx, storeserver.Config{Logger: log, Socket: filepath.Join(e.dir, "store.sock"), InProcess: true}); err != nil {
		return nil, err
	}
	acfg := agent.Config{Logger: log, Addr: "127.0.0.1", Rank: -1, Environ: os.Environ(), GPUs: cfg.GPUs, Spare: e.spare,
		TempDir: e.dir, StoreAddr: e.Store.Addr(), NCCLVersion: cfg.NCCLVersion}
	acfg.Name, _ = os.Hostname()
	if acfg.GPUs == nil && cfg.DiscoverGPUs {
		if acfg.GPUs, err = gpu.FromEnvironment(); err != nil {
			acfg.GPUError = err.Error()
		}
	}
	// The agent owns the shim from here, and closes it when it fails.
	e.spare = nil
	if e.Agent, err = agent.Start(ctx, acfg); err != nil {
		return nil, err
	}
	go e.watchStore(log)
	return e, nil
}

// watchStore passes on the store's first failure, and closes Err once the
// store has stopped serving.
func (e *Embedded) watchStore(log *zap.Logger) {
	defer close(e.errc)
	for err := range e.Store.Err() {
		log.Error("the store failed", zap.Error(err))
		select {
		case e.errc <- err:
		default:
		}
	}
}

// Err delivers the store's failure, and is closed once the store is over,
// after Close; a receive then gives nil.
func (e *Embedded) Err() <-chan error { return e.errc }

// waitSwept waits for the removal of stale socket directories, sweepWait
// at most.
func (e *Embedded) waitSwept() {
	t := time.NewTimer(sweepWait)
	defer t.Stop()
	select {
	case <-e.swept:
	case <-t.C:
	}
}

// Close stops the agent (its workers get grace before SIGKILL), then the
// store, and removes the socket's directory, waiting sweepWait at most for
// the directory and for the sweep of stale ones. Calling it again does
// nothing more and returns the first call's error. It closes what a failed
// Start made too.
func (e *Embedded) Close(grace time.Duration) error {
	e.once.Do(func() { e.err = e.close(grace) })
	return e.err
}

func (e *Embedded) close(grace time.Duration) error {
	var err error
	if e.Agent != nil {
		err = e.Agent.Close(grace)
	}
	if e.spare != nil {
		e.spare.Close()
	}
	// Once the agent is gone no one dials the store: its socket's directory
	// goes while the store closes, a few file system writes off the exit.
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		if e.dir != "" {
			os.RemoveAll(e.dir)
		}
	}()
	if e.Store != nil {
		e.Store.Close()
	}
	t := time.NewTimer(sweepWait)
	defer t.Stop()
	select {
	case <-removed:
	case <-t.C:
	}
	e.waitSwept()
	if err != nil {
		return fmt.Errorf("embedded agent: %w", err)
	}
	return nil
}
