// Package launch submits a job and follows it to its end: tagged output,
// Ctrl-C handling, the exit summary and code.
package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/eventfile"
	"github.com/musterhq/muster/progress"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// Bounds on following a job: events read ahead of the printer, and how long
// the launcher tries to follow a job again after its stream broke, unless
// Options.Reattach says otherwise.
const (
	readAhead   = 64
	reattachFor = 3 * time.Second
)

// Options says what to run and where its output goes.
type Options struct {
	Spec *musterv1.JobSpec
	// Stdin goes to the spec's stdin ranks, if it names any; nil is empty.
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
	TagOutput bool
	// OutputRanks, when set, says which ranks' output is printed
	// (--output-ranks); the others' still reaches --log-dir.
	OutputRanks func(rank int32) bool
	// TimestampOutput prefixes each line with when the launcher got it.
	TimestampOutput bool
	// Signals delivers SIGINT, SIGTERM and SIGHUP: the first stops the job
	// gracefully, the second kills it at once; and the signals of Forward.
	Signals <-chan os.Signal
	// Forward are the signals sent on to every worker of the job instead
	// (--forward-signals): SIGUSR1 to checkpoint before a preemption.
	Forward []syscall.Signal
	// CoalesceSignals, when set, takes a forwarded signal that another
	// node of the job forwarded within this long as the same delivery
	// (agent run, whose every node may get the platform's signal).
	CoalesceSignals time.Duration
	// Store names the store in messages.
	Store string
	// Liveness, when set, is how often a quiet job stream checks that the
	// store still answers: a stopped store keeps its connections open.
	Liveness time.Duration
	// WaitFlag names the flag that sets how long the job waits for nodes,
	// in progress lines (default --wait-timeout).
	WaitFlag string
	// Events, when set, gets the job's lifecycle (--events).
	Events *eventfile.Writer
	// ReportBindings prints each rank's binding as it starts
	// (--report-bindings): its GPUs, NUMA nodes, CPUs and nearest NIC.
	ReportBindings bool
	// Reattach is how long the launcher keeps trying to follow the job again
	// after it lost its store (a store that restarts takes the job over from
	// its agents); 3 s when unset.
	Reattach time.Duration
}

// Run submits the job, prints its output until it ends, and returns the
// job's exit code: the first failed worker's (128+signal for a signal), 124
// on timeout, 128+signal when stopped by a signal, 0 when all succeeded.
func Run(ctx context.Context, log *zap.Logger, c *storeclient.Client, opts Options) (int, error) {
	sub, err := submit(ctx, c, opts.Spec)
	if err != nil {
		return 1, errors.New(storeclient.ErrorMessage(err))
	}
	job := sub.GetJobId()
	if opts.Events != nil {
		opts.Events.Submitted(job, opts.Spec)
	}
	f := &follower{c: c, log: log, opts: opts, job: job, storeID: sub.GetStoreId(), p: NewPrinter(opts.Stdout, opts.Stderr, opts.TagOutput)}
	f.p.only = opts.OutputRanks
	if opts.TimestampOutput {
		f.p.now = time.Now
	}
	return f.run(ctx)
}

type follower struct {
	c    *storeclient.Client
	log  *zap.Logger
	opts Options
	job  string
	p    *Printer

	next       uint64 // the next version wanted
	storeID    string // the store incarnation next counts in
	restarted  bool   // the job went on under a restarted store
	interrupts int
	gaveUp     error // why the launcher stopped following before the job's end
	hops       int   // leaders followed at once since the stream last broke
	quiet      bool  // stdout is gone: drain, print nothing more
	lost       uint64
	lostBytes  uint64
	waited     bool // a round's wait for nodes was announced
	logsTold   bool // where --log-dir writes was said
	ran        bool // the job started workers, as far as its events told
	badLogs    int  // ranks whose --log-dir file is incomplete
	// unknownTold are the nodes whose binding was said to be unknown, once
	// each; at most the job's nodes.
	unknownTold map[string]bool

	stdinCtx context.Context // ends when the launcher stops following
	stdin    *stdinSent      // nil when no rank reads stdin
}

// forwardStdin sends the launcher's stdin to the job's stdin ranks, if any.
func (f *follower) forwardStdin() {
	if f.opts.Spec == nil || !wantsStdin(f.opts.Spec) {
		return
	}
	in := f.opts.Stdin
	if in == nil {
		in = eofReader{}
	}
	sent := &stdinSent{done: make(chan struct{})}
	f.stdin = sent
	ctx, job := f.stdinCtx, f.job
	go func() {
		defer close(sent.done)
		if err := sendStdin(ctx, f.c, job, in, sent); err != nil && ctx.Err() == nil {
			f.log.Info("stdin not delivered", zap.String("job", job), zap.Error(err))
		}
	}()
}

// stdinUnread says whether the job's stdin ranks can be given the launcher's
// stdin again: nothing of it was read (as from /dev/null, which gives only
// its end) and no read is under way, which could take what comes next.
func (f *follower) stdinUnread(ctx context.Context) bool {
	if f.stdin == nil {
		return true
	}
	select {
	case <-f.stdin.done:
	default:
		if !f.stdin.end.Load() {
			return false
		}
		// Only the lost job's stream is left to close.
		select {
		case <-f.stdin.done:
		case <-ctx.Done():
			return false
		}
	}
	return !f.stdin.read.Load()
}

func (f *follower) run(ctx context.Context) (int, error) {
	defer f.p.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.stdinCtx = wctx
	f.forwardStdin()
	reattach := f.opts.Reattach
	if reattach <= 0 {
		reattach = reattachFor
	}
	var lostAt time.Time
	delay := 100 * time.Millisecond
	for first := true; ; first = false {
		code, done, heard, cause := f.follow(ctx)
		if done {
			return code, f.gaveUp
		}
		if ctx.Err() != nil {
			return 1, ctx.Err()
		}
		if first && !heard && status.Code(cause) != codes.Unavailable {
			return 1, fmt.Errorf("watch job %s: %s", f.job, storeclient.ErrorMessage(cause))
		}
		// A replicated store's replica that does not lead names its
		// leader, which the next try follows.
		lost := f.storeName()
		f.c.FollowLeader(cause)
		if !first && status.Code(cause) == codes.NotFound {
			// A restarted store holds only what its agents reported.
			if err := f.submitAgain(ctx, cause); err != nil {
				f.p.Close()
				return 1, err
			}
			lostAt = time.Time{}
			continue
		}
		leader, refused := storeclient.LeaderOf(cause)
		if refused && leader != "" && f.hops < maxLeaderHops {
			// A replica that does not lead named the one that does.
			f.hops++
			continue
		}
		f.hops = 0
		if heard || lostAt.IsZero() {
			f.flush(ctx)
			lostAt, delay = time.Now(), 100*time.Millisecond
			if reattach > reattachFor {
				fmt.Fprintf(f.opts.Stderr, "muster: lost %s (%s); following job %s again once it answers (for up to %s)\n",
					lost, causeText(cause), f.job, reattach)
			}
		}
		if time.Since(lostAt) >= reattach {
			return f.broken(cause)
		}
		t := time.NewTimer(delay)
		select {
		case sig := <-f.opts.Signals:
			if f.signal(ctx, sig) {
				t.Stop()
				return f.abandoned(sig)
			}
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		delay = min(2*delay, 2*time.Second)
	}
}

// maxLeaderHops bounds how often the launcher follows a named leader at
// once, without waiting, before it waits between tries.
const maxLeaderHops = 3

func (f *follower) storeName() string {
	if addr := f.c.StoreAddr(); addr != "" {
		return "the store at " + addr
	}
	if f.opts.Store != "" {
		return "the store at " + f.opts.Store
	}
	return "the store"
}

// follow follows the job on one stream, from f.next on, until it ends (done,
// with its code) or the stream breaks (cause); got says events came.
func (f *follower) follow(ctx context.Context) (code int, done, got bool, cause error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.c.WatchJob(wctx, &musterv1.WatchJobRequest{JobId: f.job, Attach: true, FromVersion: f.next, StoreId: f.storeID})
	if err != nil {
		return 0, false, false, err
	}
	events := make(chan *musterv1.JobEvent, readAhead)
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
	var tick <-chan time.Time
	if f.opts.Liveness > 0 {
		t := time.NewTicker(f.opts.Liveness)
		defer t.Stop()
		tick = t.C
	}
	heard := time.Now()
	closed := closedNotify(f.opts.Stdout)
	for {
		select {
		case sig := <-f.opts.Signals:
			if f.signal(ctx, sig) {
				code, err := f.abandoned(sig)
				f.gaveUp = err
				return code, true, true, nil
			}
		case <-closed:
			closed = nil
			f.stdoutGone(ctx, syscall.EPIPE)
		case <-tick:
			if time.Since(heard) < f.opts.Liveness {
				continue
			}
			pctx, pcancel := context.WithTimeout(ctx, f.opts.Liveness)
			err := f.c.Ping(pctx)
			pcancel()
			if err != nil {
				// Unavailable, as a store that cannot be reached: a busy store
				// answers again, and the launcher follows the job on there.
				return 0, false, got, status.Errorf(codes.Unavailable, "it did not answer for %s: %s", 2*f.opts.Liveness, storeclient.ErrorMessage(err))
			}
			heard = time.Now()
		case ev, ok := <-events:
			heard = time.Now()
			if !ok {
				return 0, false, got, <-recvErr
			}
			got = true
			if code, done := f.event(ctx, ev); done {
				return code, true, true, nil
			}
			if len(events) == 0 {
				f.flush(ctx)
			}
		}
	}
}

// event handles one event; done says the job ended with code.
func (f *follower) event(ctx context.Context, ev *musterv1.JobEvent) (code int, done bool) {
	f.next = ev.GetVersion() + 1
	if f.opts.Events != nil {
		f.opts.Events.Event(ev)
	}
	switch e := ev.GetEvent().(type) {
	case *musterv1.JobEvent_State:
		f.ran = f.ran || e.State == musterv1.JobState_JOB_STATE_RUNNING
	case *musterv1.JobEvent_Started:
		f.ran = true
		// Said once a worker runs: its agent made the directory by then, and
		// a directory it could not make fails the job with that reason instead.
		if dir := f.opts.Spec.GetLogDir(); len(dir) > 0 && !f.logsTold {
			f.logsTold = true
			f.flush(ctx)
			fmt.Fprintf(f.opts.Stderr, "muster: job %s logs to %s/%s/\n", f.job, dir, f.job)
		}
		if f.opts.ReportBindings {
			f.reportBinding(ctx, e.Started)
		}
	case *musterv1.JobEvent_Exited:
		f.ran = true
		if why := e.Exited.GetLogIncomplete(); why != "" {
			f.badLogs++
			f.flush(ctx)
			fmt.Fprintf(f.opts.Stderr, "muster: rank %d's log on node %s is incomplete: %s\n", e.Exited.GetRank(), e.Exited.GetNode(), why)
		}
	case *musterv1.JobEvent_Output:
		f.ran = true
		if !f.quiet {
			f.p.Output(e.Output)
		}
	case *musterv1.JobEvent_Waiting:
		f.flush(ctx)
		line := "muster: waiting for nodes: " + progress.DescribeWaiting(e.Waiting)
		if !f.waited {
			f.waited = true
			flag := cmp.Or(f.opts.WaitFlag, "--wait-timeout")
			line += fmt.Sprintf(" (for up to %s, %s)", time.Duration(e.Waiting.GetTimeoutMs())*time.Millisecond, flag)
		}
		fmt.Fprintln(f.opts.Stderr, line)
	case *musterv1.JobEvent_Restarting:
		f.flush(ctx)
		fmt.Fprintln(f.opts.Stderr, "muster: "+DescribeRestart(e.Restarting))
	case *musterv1.JobEvent_Lost:
		f.lost += e.Lost.GetEvents()
		f.lostBytes += e.Lost.GetBytes()
		f.flush(ctx)
		fmt.Fprintf(f.opts.Stderr, "muster: %d output events of job %s were dropped before this launcher read them\n", e.Lost.GetEvents(), f.job)
	case *musterv1.JobEvent_Restarted:
		f.flush(ctx)
		f.ran = true // its agents reported it: it runs
		f.restarted, f.storeID, f.next = true, e.Restarted.GetStoreId(), 0
		fmt.Fprintf(f.opts.Stderr, "muster: %s restarted while job %s ran; the job went on, but output its workers wrote "+
			"meanwhile may be missing here (--log-dir keeps all of it)\n", f.storeName(), f.job)
	case *musterv1.JobEvent_Finished:
		f.p.Close()
		printSummary(f.opts.Stderr, f.job, e.Finished)
		code := int(e.Finished.GetExitCode())
		if f.badLogs > 0 && code == 0 {
			what := fmt.Sprintf("%d ranks' --log-dir files are", f.badLogs)
			if f.badLogs == 1 {
				what = "a rank's --log-dir file is"
			}
			fmt.Fprintf(f.opts.Stderr, "muster: job %s succeeded, but %s incomplete; exit code 1\n", f.job, what)
			code = 1
		} else if err := f.eventsErr(); err != nil && code == 0 {
			fmt.Fprintf(f.opts.Stderr, "muster: job %s succeeded, but its events file is incomplete: %s; exit code 1\n", f.job, err)
			code = 1
		} else if f.lost > 0 && code == 0 {
			fmt.Fprintf(f.opts.Stderr, "muster: job %s succeeded, but %d output events were lost; exit code 1\n", f.job, f.lost)
			code = 1
		} else if f.restarted && code == 0 {
			fmt.Fprintf(f.opts.Stderr, "muster: job %s succeeded; its output above may be incomplete, as the store restarted while it ran\n", f.job)
		}
		return code, true
	}
	return 0, false
}

// eventsErr is the error that left the --events file incomplete, if any.
func (f *follower) eventsErr() error {
	if f.opts.Events == nil {
		return nil
	}
	return f.opts.Events.Err()
}

// DescribeRestart says why a job's round stops for a new one, e.g.
// "round 0 stops: rank 3 (...) exited with code 1; restart 1 of 3".
func DescribeRestart(r *musterv1.RoundRestarting) string {
	line := fmt.Sprintf("round %d stops: %s; ", r.GetRound(), r.GetReason())
	if !r.GetCounted() {
		return line + "a new round follows (not counted as a restart)"
	}
	line += fmt.Sprintf("restart %d of %d (--max-restarts)", r.GetRestartCount(), r.GetMaxRestarts())
	if ms := r.GetBackoffMs(); ms > 0 {
		line += fmt.Sprintf(", the next round in %s (--restart-backoff)", time.Duration(ms)*time.Millisecond)
	}
	return line
}

// flush writes gathered output; a closed stdout (a reader like `head` that
// went away) stops the job, as SIGPIPE stops a pipeline.
func (f *follower) flush(ctx context.Context) {
	if f.quiet {
		return
	}
	f.p.Flush()
	if err := f.p.Err(); err != nil {
		f.stdoutGone(ctx, err)
	}
}

// stdoutGone stops the job once its output cannot be written.
func (f *follower) stdoutGone(ctx context.Context, err error) {
	if f.quiet {
		return
	}
	f.quiet = true
	reason := "stopped: its output could not be written: " + err.Error()
	code := int32(1)
	if errors.Is(err, syscall.EPIPE) {
		reason, code = "stopped: its output pipe was closed", 128+int32(syscall.SIGPIPE)
	}
	f.cancel(ctx, false, reason, code)
}

// It reports true when the launcher should give the job up: a second
// interrupt that could not reach the store either, which leaves the job's
// fate to be found later rather than a user waiting on a store that is gone.
func (f *follower) signal(ctx context.Context, sig os.Signal) bool {
	s, _ := sig.(syscall.Signal)
	if slices.Contains(f.opts.Forward, s) {
		f.forward(ctx, s)
		return false
	}
	f.interrupts++
	name := unix.SignalName(s)
	force := f.interrupts > 1
	f.flush(ctx)
	if force {
		fmt.Fprintf(f.opts.Stderr, "muster: %s again: killing job %s at once\n", name, f.job)
	} else {
		fmt.Fprintf(f.opts.Stderr, "muster: %s: stopping job %s (a second one kills it at once)\n", name, f.job)
	}
	return f.cancel(ctx, force, "stopped by "+name, 128+int32(s)) != nil && force
}

// abandoned ends the launcher after a second interrupt the store did not
// hear: the job may still run, and where to find it is said.
func (f *follower) abandoned(sig os.Signal) (int, error) {
	f.p.Close()
	s, _ := sig.(syscall.Signal)
	return 128 + int(s), fmt.Errorf("job %s: %s again, and %s does not answer: the launcher stops following; the job's fate is unknown: "+
		"launcher jobs %s shows it once the store answers, and launcher cancel %s stops it", f.job, unix.SignalName(s), f.storeName(), f.job, f.job)
}

// forward sends sig to every worker of the job.
func (f *follower) forward(ctx context.Context, sig syscall.Signal) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	name := unix.SignalName(sig)
	res, err := f.c.Signal(cctx, &musterv1.SignalRequest{JobId: f.job, Signal: int32(sig), CoalesceMs: f.opts.CoalesceSignals.Milliseconds()})
	f.flush(ctx)
	switch {
	case err != nil:
		fmt.Fprintf(f.opts.Stderr, "muster: %s not sent to job %s's workers: %s\n", name, f.job, storeclient.ErrorMessage(err))
	case res.GetCoalesced():
		fmt.Fprintf(f.opts.Stderr, "muster: %s: already sent to job %s's workers (another node forwarded it within %s)\n",
			name, f.job, f.opts.CoalesceSignals)
	default:
		fmt.Fprintf(f.opts.Stderr, "muster: %s: sent to job %s's workers (%s)\n", name, f.job, Nodes(int(res.GetNodes())))
	}
}

// Nodes says how many nodes: "1 node", "4 nodes".
func Nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func (f *follower) cancel(ctx context.Context, force bool, reason string, code int32) error {
	cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	_, err := f.c.Cancel(cctx, &musterv1.CancelRequest{JobId: f.job, Force: force, Reason: reason, ExitCode: code})
	if err != nil {
		fmt.Fprintf(f.opts.Stderr, "muster: could not stop job %s: %s\n", f.job, storeclient.ErrorMessage(err))
	}
	return err
}

// cancelTimeout bounds a cancel's call: a store that does not answer within
// it is gone for the person at the terminal.
const cancelTimeout = 5 * time.Second

// submitAgain submits the job again after a restarted store lost it: one
// that never started a worker had no agent to report it, and nothing of it
// ran, so the spec this launcher holds runs it as if it had just been
// submitted, under the new job ID the store gives it. A job that ran is not
// run twice: the launcher says at once that it is lost.
func (f *follower) submitAgain(ctx context.Context, cause error) error {
	lost := fmt.Sprintf("job %s: %s restarted, and no agent reports the job", f.job, f.storeName())
	switch {
	case f.ran || f.opts.Spec == nil:
		return fmt.Errorf("%s: it was lost with its nodes; its workers' end is unknown (%s)", lost, storeclient.ErrorMessage(cause))
	case !f.stdinUnread(ctx):
		return fmt.Errorf("%s; it had not started, but stdin already read went with it: submit it again", lost)
	}
	sub, err := submit(ctx, f.c, f.opts.Spec)
	if err != nil {
		return fmt.Errorf("%s; it had not started, and submitting it again failed: %s", lost, storeclient.ErrorMessage(err))
	}
	f.flush(ctx)
	fmt.Fprintf(f.opts.Stderr, "muster: %s restarted before job %s started; submitted it again as job %s\n", f.storeName(), f.job, sub.GetJobId())
	f.job, f.storeID, f.next, f.waited = sub.GetJobId(), sub.GetStoreId(), 0, false
	// Only stdin's end was read: the new job's ranks get it again.
	f.forwardStdin()
	if f.opts.Events != nil {
		f.opts.Events.Submitted(f.job, f.opts.Spec)
	}
	if dir := f.opts.Spec.GetLogDir(); len(dir) > 0 {
		fmt.Fprintf(f.opts.Stderr, "muster: job %s logs to %s/%s/\n", f.job, dir, f.job)
	}
	return nil
}

// broken says the job's end could not be learnt: the store did not answer
// again in time.
func (f *follower) broken(cause error) (int, error) {
	f.p.Close()
	return 1, fmt.Errorf("job %s: lost contact with %s before the job ended: %s; the job's state is unknown (see launcher jobs)",
		f.job, f.storeName(), causeText(cause))
}

func causeText(err error) string {
	if errors.Is(err, io.EOF) {
		return "the job's stream ended"
	}
	if _, ok := status.FromError(err); ok {
		return storeclient.ErrorMessage(err)
	}
	return err.Error()
}

// printSummary names what ended the job, saying each thing once: the
// failed rank, its node, its exit code or signal, the last lines of its
// stderr; or why the job was stopped, and its exit code.
func printSummary(w io.Writer, job string, fin *musterv1.JobFinished) {
	defer printRoundCauses(w, job, fin)
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

// printRoundCauses names why each round of a job that ran more than one
// stopped, the last one's end included.
func printRoundCauses(w io.Writer, job string, fin *musterv1.JobFinished) {
	causes := fin.GetRoundCauses()
	if len(causes) == 0 {
		return
	}
	dropped := fin.GetRoundCausesDropped()
	ran := int(dropped) + len(causes)
	if !fin.GetLastRoundNotStarted() {
		ran++
	}
	plural := "s"
	if ran == 1 {
		plural = ""
	}
	fmt.Fprintf(w, "muster: job %s ran %d round%s:\n", job, ran, plural)
	if dropped > 0 {
		fmt.Fprintf(w, "    (%d earlier rounds not kept)\n", dropped)
	}
	for _, c := range causes {
		fmt.Fprintf(w, "    %s\n", c)
	}
	last := strings.ToLower(strings.TrimPrefix(fin.GetState().String(), "JOB_STATE_"))
	if s := fin.GetSummary(); s != "" && fin.GetState() != musterv1.JobState_JOB_STATE_SUCCEEDED {
		last += ": " + s
	}
	if fin.GetLastRoundNotStarted() {
		last = "not started: " + last
	}
	fmt.Fprintf(w, "    round %d: %s\n", int(dropped)+len(causes), last)
}
