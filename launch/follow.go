package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// Options says what to run and where its output goes.
type Options struct {
	Spec *musterv1.JobSpec
	// Stdin goes to the spec's stdin ranks, if it names any; nil is empty.
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
	TagOutput bool
	// Signals delivers SIGINT/SIGTERM: the first stops the job gracefully,
	// the second kills it at once.
	Signals <-chan os.Signal
}

// Run submits the job, prints its output until it ends, and returns the
// job's exit code: the first failed worker's (128+signal for a signal), 124
// on timeout, 128+signal when stopped by a signal, 0 when all succeeded.
func Run(ctx context.Context, log *zap.Logger, c *rendezvous.Client, opts Options) (int, error) {
	sub, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: opts.Spec})
	if err != nil {
		return 1, errors.New(rendezvous.ErrorMessage(err))
	}
	job := sub.GetJobId()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.WatchJob(wctx, &musterv1.WatchJobRequest{JobId: job, Attach: true})
	if err != nil {
		return 1, fmt.Errorf("watch job %s: %s", job, rendezvous.ErrorMessage(err))
	}
	if wantsStdin(opts.Spec) {
		in := opts.Stdin
		if in == nil {
			in = eofReader{}
		}
		go func() {
			if err := sendStdin(wctx, c, job, in); err != nil && wctx.Err() == nil {
				log.Info("stdin not delivered", zap.String("job", job), zap.Error(err))
			}
		}()
	}
	events := make(chan *musterv1.JobEvent, 4096)
	recvErr := make(chan error, 1)
	go func() {
		defer close(events)
		for {
			ev, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			events <- ev
		}
	}()

	p := NewPrinter(opts.Stdout, opts.Stderr, opts.TagOutput)
	defer p.Close()
	interrupts := 0
	for {
		select {
		case sig := <-opts.Signals:
			interrupts++
			s, _ := sig.(syscall.Signal)
			name := unix.SignalName(s)
			force := interrupts > 1
			p.Flush()
			if force {
				fmt.Fprintf(opts.Stderr, "muster: %s again: killing job %s at once\n", name, job)
			} else {
				fmt.Fprintf(opts.Stderr, "muster: %s: stopping job %s (a second one kills it at once)\n", name, job)
			}
			_, err := c.Cancel(ctx, &musterv1.CancelRequest{JobId: job, Force: force,
				Reason: "stopped by " + name, ExitCode: 128 + int32(s)})
			if err != nil {
				fmt.Fprintf(opts.Stderr, "muster: could not stop job %s: %s\n", job, rendezvous.ErrorMessage(err))
			}
		case ev, ok := <-events:
			if !ok {
				p.Close()
				return 1, fmt.Errorf("job %s: lost the store before the job ended: %s", job, rendezvous.ErrorMessage(<-recvErr))
			}
			switch e := ev.GetEvent().(type) {
			case *musterv1.JobEvent_Output:
				p.Line(e.Output)
			case *musterv1.JobEvent_Lost:
				p.Flush()
				fmt.Fprintf(opts.Stderr, "muster: %d output events were dropped: the launcher fell behind\n", e.Lost.GetEvents())
			case *musterv1.JobEvent_Finished:
				p.Close()
				printSummary(opts.Stderr, job, e.Finished)
				return int(e.Finished.GetExitCode()), nil
			}
			if len(events) == 0 {
				p.Flush()
			}
		}
	}
}

// printSummary names what ended the job, saying each thing once: the
// failed rank, its node, its exit code or signal, the last lines of its
// stderr; or why the job was stopped, and its exit code.
func printSummary(w io.Writer, job string, fin *musterv1.JobFinished) {
	switch fin.GetState() {
	case musterv1.JobState_JOB_STATE_SUCCEEDED:
		return
	case musterv1.JobState_JOB_STATE_CANCELLED:
		// The summary says why: "stopped by SIGTERM", "timed out after 5s".
		fmt.Fprintf(w, "muster: job %s %s (exit code %d)\n", job, fin.GetSummary(), fin.GetExitCode())
		return
	}
	f := fin.GetFailure()
	line := fmt.Sprintf("muster: job %s failed: %s", job, fin.GetSummary())
	// "exited with code 3" already says the job's exit code; a signal or an
	// error does not.
	if f == nil || f.GetSignal() != 0 || f.GetError() != "" {
		line += fmt.Sprintf("; exit code %d", fin.GetExitCode())
	}
	fmt.Fprintln(w, line)
	if f != nil && len(f.GetStderrTail()) > 0 {
		fmt.Fprintf(w, "muster: last lines of rank %d's stderr:\n", f.GetRank())
		for _, l := range f.GetStderrTail() {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}
