package agent

import (
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/supervise"
)

// outputStream makes one of a worker's output streams (0 stdout, 1 stderr):
// a pseudo-terminal of its own when the job's --tty names the stream and
// the worker's rank, else a pipe. It returns the agent's reader and the
// worker's end. A node that cannot make a pseudo-terminal (no /dev/ptmx in
// its container) gives a pipe, and says so in its log.
func (js *jobStart) outputStream(w *worker, stream int) (*supervise.Reader, *os.File, error) {
	if t := js.asg.GetSpec().GetTty(); wantsTerminal(t, w.plan.rank, stream) {
		uid := -1
		if c := w.plan.spec.cred; c != nil {
			uid = int(c.Uid)
		}
		master, slave, err := supervise.OpenTerminal(uint16(t.GetRows()), uint16(t.GetCols()), uid)
		if err == nil {
			return supervise.NewTerminalReader(master), slave, nil
		}
		js.sup.log.Warn("--tty: a pipe instead", zap.String("job", js.sup.job), zap.Int("rank", w.plan.rank), zap.Error(err))
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	return supervise.NewReader(r), wr, nil
}

// wantsTerminal says whether t gives rank's stream a pseudo-terminal.
func wantsTerminal(t *musterv1.Terminal, rank, stream int) bool {
	if !jobspec.TerminalRank(t, int32(rank)) {
		return false
	}
	if stream == 1 {
		return t.GetStderr()
	}
	return t.GetStdout()
}

// terminalEnv sets TERM, the launcher's, in the environment of a worker
// whose stdout is a terminal, unless the user's -x set it.
func terminalEnv(env []string, t *musterv1.Terminal, rank int, user []string) []string {
	term := t.GetTerm()
	if term == "" || !wantsTerminal(t, rank, 0) {
		return env
	}
	for _, kv := range user {
		if strings.HasPrefix(kv, "TERM=") {
			return env
		}
	}
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "TERM=") })
	return append(env, "TERM="+term)
}
