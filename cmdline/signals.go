package cmdline

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/musterhq/muster/jobspec"
	"golang.org/x/sys/unix"
)

// Signals is a list of signal names, as --forward-signals takes it:
// USR1,USR2 or SIGUSR1 SIGTERM (commas or spaces), or none.
type Signals struct {
	sigs []syscall.Signal
}

// NewSignals returns a signal-list flag value of def, which must parse.
func NewSignals(def string) *Signals {
	s := &Signals{}
	if err := s.Set(def); err != nil {
		panic(err)
	}
	return s
}

// maxSignalList bounds what Set reads: the names it takes fit many times over.
const maxSignalList = 256

func (s *Signals) Set(list string) error {
	if len(list) > maxSignalList {
		return fmt.Errorf("%d bytes: longer than any list of signals", len(list))
	}
	var sigs []syscall.Signal
	for _, name := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' }) {
		if strings.EqualFold(name, "none") {
			continue
		}
		sig, ok := jobspec.ForwardableSignal(strings.ToUpper(name))
		if !ok {
			return fmt.Errorf("%q is not a signal muster forwards: want none or some of %s", name, strings.Join(jobspec.ForwardableNames(), ","))
		}
		if !slices.Contains(sigs, sig) {
			sigs = append(sigs, sig)
		}
	}
	s.sigs = sigs
	return nil
}

func (s *Signals) String() string {
	if len(s.sigs) == 0 {
		return "none"
	}
	names := make([]string, len(s.sigs))
	for i, sig := range s.sigs {
		names[i] = strings.TrimPrefix(unix.SignalName(sig), "SIG")
	}
	return strings.Join(names, ",")
}

// Values are the signals, each once, in the order given.
func (s *Signals) Values() []syscall.Signal { return slices.Clone(s.sigs) }

// CatchSignals delivers, from now on, the signals that stop a job
// gracefully (SIGINT, SIGTERM, and SIGHUP, a closed terminal, as torchrun
// has it) and forward, which go to the workers instead, until stop. A
// closed stdout then fails the write instead of killing the process
// (SIGPIPE), which stops the job and exits as a pipeline would.
func CatchSignals(forward []syscall.Signal) (sigs <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 4)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	for _, s := range forward {
		signal.Notify(c, s)
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return c, func() { signal.Stop(c) }
}
