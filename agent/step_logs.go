package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"
)

// openLogs opens each worker's kept output and, when the job has a log
// directory, its two log files there: rank-N.log for its stdout and
// rank-N.err.log for its stderr, so that each line keeps its stream and its
// order in it (the order of lines of two pipes, one against the other, is
// not known to anyone who reads them).
func (js *jobStart) openLogs() error {
	for _, w := range js.workers {
		if kept := js.a.rankLogs; kept != nil {
			kw, err := kept.Rank(js.asg.GetJobId(), w.plan.rank)
			if err != nil {
				// The job runs anyway: only `launcher logs` misses it.
				js.sup.log.Warn("rank output not kept", zap.String("job", js.sup.job), zap.Int("rank", w.plan.rank), zap.Error(err))
			} else {
				w.kept = kw
			}
		}
		if js.files.logDir == "" {
			continue
		}
		for i, name := range [2]string{"rank-%d.log", "rank-%d.err.log"} {
			lf, err := openLogFile(filepath.Join(js.files.logDir, fmt.Sprintf(name, w.plan.rank)), w.plan.spec.cred)
			if err != nil {
				return errors.New(validText(fmt.Sprintf("--log-dir: %v", err)))
			}
			w.logs[i] = lf
		}
	}
	return nil
}

// closeLogs closes the workers' log files and kept output, once the job is
// over or will not start.
func (js *jobStart) closeLogs() {
	for _, w := range js.workers {
		for i, lf := range w.logs {
			if lf != nil {
				if err := lf.Close(); err != nil {
					js.sup.log.Warn("log file incomplete", zap.String("job", js.sup.job), zap.Int("rank", w.plan.rank), zap.Error(err))
				}
				w.logs[i] = nil
			}
		}
		if w.kept != nil {
			w.kept.Close()
			w.kept = nil
		}
	}
}
