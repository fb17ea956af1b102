package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
	node  *Node
	dir   string
}

// EmbeddedConfig configures the embedded default.
type EmbeddedConfig struct {
	Logger *zap.Logger
	// DiscoverGPUs asks NVML for the machine's GPUs; jobs without GPUs skip it.
	DiscoverGPUs bool
	// GPUs, when set, declares the GPUs instead of discovering them.
	GPUs []gpu.Device
}

// privateDir makes a directory only this user can enter, short enough for
// a socket path. Directories that launchers killed before they could clean
// up left behind go first.
func privateDir() (string, error) {
	parent := os.TempDir()
	if len(parent) > 64 {
		parent = "/tmp"
	}
	removeStaleDirs(parent)
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

// StartEmbedded starts the store on a Unix socket in a private directory and
// registers a local agent with it.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	// The job's shim starts now, while the store and the agent do: a new
	// process's exec and start-up are a third of a small job's time.
	spare, err := supervise.StartSpare()
	if err != nil {
		return nil, err
	}
	dir, err := privateDir()
	if err != nil {
		spare.Close()
		return nil, err
	}
	ncfg := Config{Logger: cfg.Logger, InProcess: true, Socket: filepath.Join(dir, "store.sock"),
		Agent: agent.Config{Addr: "127.0.0.1", Rank: -1, Environ: os.Environ(), GPUs: cfg.GPUs, Spare: spare, TempDir: dir}}
	if ncfg.Agent.GPUs == nil && cfg.DiscoverGPUs {
		if ncfg.Agent.GPUs, err = gpu.FromEnvironment(); err != nil {
			ncfg.Agent.GPUError = err.Error()
		}
	}
	n, err := Start(ctx, ncfg)
	if err != nil {
		spare.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return &Embedded{Store: n.Store(), Agent: n.Agent(), node: n, dir: dir}, nil
}

// Close stops the agent (its workers get grace before SIGKILL), then the
// store, and removes the socket's directory.
func (e *Embedded) Close(grace time.Duration) error {
	err := e.node.Close(grace)
	os.RemoveAll(e.dir)
	if err != nil {
		return fmt.Errorf("embedded agent: %w", err)
	}
	return nil
}
