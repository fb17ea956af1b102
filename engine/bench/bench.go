package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/engine"
)

// Main runs the bench as one worker of a muster job: it reads the job from
// the environment, loads NCCL, joins the communicator and, on rank 0, prints
// the table to out.
func Main(ctx context.Context, log *zap.Logger, out io.Writer, opts Options) error {
	w, err := engine.FromEnv()
	if err != nil {
		return err
	}
	if err := opts.Validate(w.WorldSize); err != nil {
		return err
	}
	lib, err := engine.Load(ctx, log)
	if err != nil {
		return err
	}
	// CUDA's current device belongs to the OS thread; every call below must
	// run on the thread that set it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := lib.SetDevice(w.Device); err != nil {
		return err
	}
	comm, err := lib.CommInitRank(w.UniqueID, w.WorldSize, w.Rank)
	if err != nil {
		return fmt.Errorf("rank %d: %w", w.Rank, err)
	}
	r, err := newRunner(lib, comm, w, opts)
	if err == nil {
		err = r.run(ctx, log, out)
		r.close()
	}
	if err != nil {
		_ = comm.Abort() // peers may be gone; Destroy could wait for them
		return fmt.Errorf("rank %d: %w", w.Rank, err)
	}
	return comm.Destroy()
}

// runner holds one rank's buffers for a run of the bench.
type runner struct {
	lib          *engine.Library
	comm         *engine.Comm
	opts         Options
	rank, nranks int
	device       int
	stream       engine.Stream
	send, recv   engine.DevicePtr
	scratch      engine.DevicePtr // 8 bytes for reducing a number across ranks
	hostIn       []byte           // allocated on first check
	hostWant     []byte
	hostGot      []byte
}

func newRunner(lib *engine.Library, comm *engine.Comm, w engine.Worker, opts Options) (*runner, error) {
	r := &runner{lib: lib, comm: comm, opts: opts, rank: w.Rank, nranks: w.WorldSize, device: w.Device}
	var err error
	if r.stream, err = lib.StreamCreate(); err != nil {
		return nil, err
	}
	elt := opts.DataType.Size()
	l := opts.Collective.layoutFor(opts.MaxBytes/int64(elt), elt, r.nranks)
	// At least one 64-byte record per rank, for the preamble's gather.
	bufBytes := max(int(max(l.sendCount, l.recvCount))*elt, 64*r.nranks)
	if r.send, err = lib.Malloc(bufBytes); err != nil {
		r.close()
		return nil, err
	}
	if r.recv, err = lib.Malloc(bufBytes); err != nil {
		r.close()
		return nil, err
	}
	if r.scratch, err = lib.Malloc(8); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *runner) close() {
	for _, p := range []engine.DevicePtr{r.send, r.recv, r.scratch} {
		if p != 0 {
			_ = r.lib.Free(p)
		}
	}
	if r.stream != 0 {
		_ = r.lib.StreamDestroy(r.stream)
	}
}

func (r *runner) run(ctx context.Context, log *zap.Logger, out io.Writer) error {
	o := r.opts
	elt := o.DataType.Size()
	// Every size once, doubling, so connections and buffers are set up
	// before anything is timed.
	for _, size := range o.warmupSizes() {
		l := o.Collective.layoutFor(size/int64(elt), elt, r.nranks)
		for range o.WarmupIters {
			if err := r.launch(l, false); err != nil {
				return err
			}
		}
		if err := r.lib.StreamSynchronize(r.stream); err != nil {
			return err
		}
	}
	if err := r.printPreamble(out); err != nil {
		return err
	}
	if r.rank == 0 {
		writeHeader(out)
	}
	var sumBW float64
	var nBW int
	var wrongTotal int64
	for _, size := range o.Sizes() {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := o.Collective.layoutFor(size/int64(elt), elt, r.nranks)
		rw := row{
			bytes: max(l.sendCount, l.recvCount) * int64(elt), count: l.paramCount,
			typeName: o.DataType.String(), opName: "none", root: -1,
		}
		if o.Collective.reduces() {
			rw.opName = o.Op.String()
		}
		if o.Collective.rooted() {
			rw.root = o.Root
		}
		for _, inPlace := range []bool{false, true} {
			res, err := r.measure(l, inPlace)
			if err != nil {
				return fmt.Errorf("%v of %d bytes: %w", o.Collective, rw.bytes, err)
			}
			if inPlace {
				rw.inPlace = res
			} else {
				rw.outOfPlace = res
			}
			sumBW += res.busBW
			nBW++
			wrongTotal += res.wrong
		}
		if r.rank == 0 {
			writeRow(out, rw)
		}
		log.Debug("bench size done", zap.Int64("bytes", rw.bytes))
	}
	if r.rank == 0 {
		avg := 0.0
		if nBW > 0 {
			avg = sumBW / float64(nBW)
		}
		writeFooter(out, wrongTotal, avg)
		fmt.Fprintf(out, "# Collective test concluded: %v\n", o.Collective)
	}
	if wrongTotal > 0 {
		return fmt.Errorf("%d wrong elements in %v results", wrongTotal, o.Collective)
	}
	return nil
}

// printPreamble prints the run's settings and, gathered from every rank,
// where each rank runs.
func (r *runner) printPreamble(out io.Writer) error {
	host, _ := os.Hostname()
	const rec = 64 // one rank's record: pid, device, host name
	mine := make([]byte, rec)
	binary.LittleEndian.PutUint32(mine[0:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(mine[4:], uint32(r.device))
	copy(mine[8:], host)
	all, err := r.allGatherHost(mine)
	if err != nil || r.rank != 0 {
		return err
	}
	o := r.opts
	nv, _ := r.lib.NCCLVersion()
	fmt.Fprintf(out, "# muster bench %v, nccl %s (%d)\n", o.Collective, engine.VersionString(nv), nv)
	fmt.Fprintf(out, "# nranks %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d validation: %d\n",
		r.nranks, o.MinBytes, o.MaxBytes, stepValue(o), stepKind(o), o.WarmupIters, o.Iters, o.Check)
	fmt.Fprintf(out, "#\n# Using devices\n")
	for i := 0; i < r.nranks; i++ {
		b := all[i*rec : (i+1)*rec]
		name := string(b[8:])
		if n := strings.IndexByte(name, 0); n >= 0 {
			name = name[:n]
		}
		fmt.Fprintf(out, "#  Rank %2d Pid %6d on %10s device %2d\n", i, binary.LittleEndian.Uint32(b[0:]), name, binary.LittleEndian.Uint32(b[4:]))
	}
	return nil
}

func stepValue(o Options) int64 {
	if o.StepFactor > 1 {
		return o.StepFactor
	}
	return o.StepBytes
}

func stepKind(o Options) string {
	if o.StepFactor > 1 {
		return "factor"
	}
	return "bytes"
}

// launch queues one operation on the stream.
func (r *runner) launch(l layout, inPlace bool) error {
	o := r.opts
	elt := o.DataType.Size()
	send, recv := r.send, r.recv
	if inPlace {
		send = r.recv.Add(int(l.sendInPlace) * r.rank * elt)
		recv = r.recv.Add(int(l.recvInPlace) * r.rank * elt)
	}
	n, t, s, c := int(l.paramCount), o.DataType, r.stream, r.comm
	switch o.Collective {
	case AllReduce:
		return c.AllReduce(send, recv, n, t, o.Op, s)
	case AllGather:
		return c.AllGather(send, recv, n, t, s)
	case ReduceScatter:
		return c.ReduceScatter(send, recv, n, t, o.Op, s)
	case Broadcast:
		return c.Broadcast(send, recv, n, t, o.Root, s)
	case Reduce:
		return c.Reduce(send, recv, n, t, o.Op, o.Root, s)
	case AllToAll:
		// One send and one receive per peer, launched together as a group.
		if err := r.lib.GroupStart(); err != nil {
			return err
		}
		for p := 0; p < r.nranks; p++ {
			if err := c.Send(send.Add(p*n*elt), n, t, p, s); err != nil {
				_ = r.lib.GroupEnd()
				return err
			}
			if err := c.Recv(recv.Add(p*n*elt), n, t, p, s); err != nil {
				_ = r.lib.GroupEnd()
				return err
			}
		}
		return r.lib.GroupEnd()
	case SendRecv:
		// A ring: send to the next rank, receive from the previous one.
		if err := r.lib.GroupStart(); err != nil {
			return err
		}
		errSend := c.Send(send, n, t, (r.rank+1)%r.nranks, s)
		errRecv := c.Recv(recv, n, t, (r.rank-1+r.nranks)%r.nranks, s)
		errEnd := r.lib.GroupEnd()
		for _, err := range []error{errSend, errRecv, errEnd} {
			if err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown collective %v", o.Collective)
}

// measure times Iters operations back to back (wall clock from the first
// launch to the end of the last, averaged over ranks), then checks a fresh
// run's results.
func (r *runner) measure(l layout, inPlace bool) (result, error) {
	var res result
	o := r.opts
	elt := o.DataType.Size()
	// One untimed operation and a barrier, so all ranks start together.
	if err := r.launch(l, inPlace); err != nil {
		return res, err
	}
	if err := r.barrier(); err != nil {
		return res, err
	}
	start := time.Now()
	for range o.Iters {
		if err := r.launch(l, inPlace); err != nil {
			return res, err
		}
	}
	if err := r.lib.StreamSynchronize(r.stream); err != nil {
		return res, err
	}
	sec := time.Since(start).Seconds() / float64(o.Iters)
	total, err := r.sumAcrossRanks(sec)
	if err != nil {
		return res, err
	}
	sec = total / float64(r.nranks)
	res.usec = sec * 1e6
	res.algBW, res.busBW = o.Collective.bandwidth(l.paramCount, elt, r.nranks, sec)

	// In-place all-to-all and send/receive overwrite their input while
	// sending it; their results are not checked, as in nccl-tests.
	if o.Check == 0 || inPlace && (o.Collective == AllToAll || o.Collective == SendRecv) {
		return res, nil
	}
	res.checked = true
	for range o.Check {
		wrong, err := r.check(l, inPlace)
		if err != nil {
			return res, err
		}
		w, err := r.sumAcrossRanks(float64(wrong))
		if err != nil {
			return res, err
		}
		res.wrong = int64(w)
		if res.wrong != 0 {
			break
		}
	}
	return res, nil
}

// check writes this rank's input, runs the operation once, and counts the
// elements of the output that differ from what they must be.
func (r *runner) check(l layout, inPlace bool) (int64, error) {
	o := r.opts
	t, elt, n := o.DataType, int64(o.DataType.Size()), r.nranks
	op := o.Op
	if !o.Collective.reduces() {
		op = engine.Sum
	}
	sendBytes, recvBytes := l.sendCount*elt, l.recvCount*elt
	if int64(len(r.hostIn)) < sendBytes {
		r.hostIn = make([]byte, sendBytes)
	}
	if int64(len(r.hostWant)) < recvBytes {
		r.hostWant = make([]byte, recvBytes)
		r.hostGot = make([]byte, recvBytes)
	}
	in, want, got := r.hostIn[:sendBytes], r.hostWant[:recvBytes], r.hostGot[:recvBytes]

	fill(in, t, l.sendCount, func(j int64) float64 { return value(t, op, r.rank, j) })
	if err := r.lib.Memset(r.recv, 0, int(max(recvBytes, sendBytes))); err != nil {
		return 0, err
	}
	inAt, outAt := r.send, r.recv
	if inPlace {
		inAt = r.recv.Add(int(l.sendInPlace * int64(r.rank) * elt))
		outAt = r.recv.Add(int(l.recvInPlace * int64(r.rank) * elt))
	}
	if err := r.lib.CopyToDevice(inAt, in); err != nil {
		return 0, err
	}
	if err := r.launch(l, inPlace); err != nil {
		return 0, err
	}
	if err := r.lib.StreamSynchronize(r.stream); err != nil {
		return 0, err
	}

	b := l.paramCount
	switch o.Collective {
	case AllReduce, Reduce:
		if o.Collective == Reduce && r.rank != o.Root {
			return 0, nil // only the root receives
		}
		fill(want, t, b, func(j int64) float64 { return reduced(t, op, n, j) })
	case Broadcast:
		fill(want, t, b, func(j int64) float64 { return value(t, op, o.Root, j) })
	case SendRecv:
		from := (r.rank - 1 + n) % n
		fill(want, t, b, func(j int64) float64 { return value(t, op, from, j) })
	case AllGather:
		for p := range n {
			fill(want[int64(p)*b*elt:], t, b, func(j int64) float64 { return value(t, op, p, j) })
		}
	case ReduceScatter:
		off := int64(r.rank) * b
		fill(want, t, b, func(j int64) float64 { return reduced(t, op, n, off+j) })
	case AllToAll:
		off := int64(r.rank) * b
		for p := range n {
			fill(want[int64(p)*b*elt:], t, b, func(j int64) float64 { return value(t, op, p, off+j) })
		}
	}
	if err := r.lib.CopyToHost(got, outAt); err != nil {
		return 0, err
	}
	return compare(got, want, t), nil
}

// sumAcrossRanks adds v over all ranks through NCCL; it also serves as a
// barrier.
func (r *runner) sumAcrossRanks(v float64) (float64, error) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
	if err := r.lib.CopyToDevice(r.scratch, b[:]); err != nil {
		return 0, err
	}
	if err := r.comm.AllReduce(r.scratch, r.scratch, 1, engine.Float64, engine.Sum, r.stream); err != nil {
		return 0, err
	}
	if err := r.lib.StreamSynchronize(r.stream); err != nil {
		return 0, err
	}
	if err := r.lib.CopyToHost(b[:], r.scratch); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b[:])), nil
}

func (r *runner) barrier() error {
	_, err := r.sumAcrossRanks(0)
	return err
}

// allGatherHost gathers one equal-sized record from every rank, in rank order.
func (r *runner) allGatherHost(mine []byte) ([]byte, error) {
	all := make([]byte, len(mine)*r.nranks)
	// The receive buffer is large enough for any run: it holds MaxBytes.
	if err := r.lib.CopyToDevice(r.send, mine); err != nil {
		return nil, err
	}
	if err := r.comm.AllGather(r.send, r.recv, len(mine), engine.Uint8, r.stream); err != nil {
		return nil, err
	}
	if err := r.lib.StreamSynchronize(r.stream); err != nil {
		return nil, err
	}
	if err := r.lib.CopyToHost(all, r.recv); err != nil {
		return nil, err
	}
	return all, nil
}
