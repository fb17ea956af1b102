package cluster

import (
	"bytes"
	"log"
	"strings"

	"go.uber.org/zap"
)

// zapWriter takes memberlist's log lines ("[WARN] memberlist: ...") and writes each to zap at
// debug level, with memberlist's own level as a field: its warnings include routine events
// (a peer refused, a probe missed) that the cluster reports through its events instead.
type zapWriter struct{ log *zap.Logger }

func (w zapWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte{'\n'}) {
		s := string(line)
		level := "info"
		if strings.HasPrefix(s, "[") {
			if i := strings.IndexByte(s, ']'); i > 0 {
				level, s = strings.ToLower(s[1:i]), strings.TrimSpace(s[i+1:])
			}
		}
		s = strings.TrimPrefix(s, "memberlist: ")
		w.log.Debug(s, zap.String("memberlist_level", level))
	}
	return len(p), nil
}

func memberlistLogger(l *zap.Logger) *log.Logger {
	return log.New(zapWriter{l.Named("memberlist")}, "", 0)
}
