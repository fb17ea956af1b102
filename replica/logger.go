package replica

import (
	"bytes"
	"io"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
)

// raftLogger hands raft's log lines (hclog) to the node's zap logger.
func raftLogger(log *zap.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: zapWriter{log.Named(name)},
		DisableTime: true})
}

type zapWriter struct{ log *zap.Logger }

func (w zapWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case bytes.Contains(p, []byte("failed to heartbeat to")), bytes.Contains(p, []byte("failed to appendEntries to")),
		bytes.Contains(p, []byte("failed to make requestVote RPC")):
		// Raft retries a down replica many times a second; its being
		// down is said once, by "failed to contact".
		w.log.Debug(line)
	case bytes.Contains(p, []byte("[ERROR]")), bytes.Contains(p, []byte("[WARN]")):
		w.log.Warn(line)
	default:
		w.log.Info(line)
	}
	return len(p), nil
}

var _ io.Writer = zapWriter{}
