package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/musterhq/muster/engine/uniqueid"
)

// ncclUniqueIDArg is ncclUniqueId as a C struct, passed by value. It is 128
// bytes, so the SysV ABI puts it on the stack on amd64 and AAPCS64 passes a
// pointer to a copy on arm64; purego implements both for struct arguments.
type ncclUniqueIDArg struct {
	Internal [uniqueid.Bytes]byte
}

// ncclFuncs are NCCL's entry points. Handles (ncclComm_t, cudaStream_t) and
// device pointers travel as uintptr.
type ncclFuncs struct {
	getVersion        func(version *int32) int32
	getErrorString    func(result int32) string
	getLastError      func(comm uintptr) string
	commInitRank      func(comm *uintptr, nranks int32, id ncclUniqueIDArg, rank int32) int32
	commAbort         func(comm uintptr) int32
	commDestroy       func(comm uintptr) int32
	commCount         func(comm uintptr, count *int32) int32
	commUserRank      func(comm uintptr, rank *int32) int32
	commGetAsyncError func(comm uintptr, result *int32) int32
	allReduce         func(send, recv, count uintptr, dtype DataType, op RedOp, comm, stream uintptr) int32
	allGather         func(send, recv, sendCount uintptr, dtype DataType, comm, stream uintptr) int32
	reduceScatter     func(send, recv, recvCount uintptr, dtype DataType, op RedOp, comm, stream uintptr) int32
	broadcast         func(send, recv, count uintptr, dtype DataType, root int32, comm, stream uintptr) int32
	reduce            func(send, recv, count uintptr, dtype DataType, op RedOp, root int32, comm, stream uintptr) int32
	send              func(buf, count uintptr, dtype DataType, peer int32, comm, stream uintptr) int32
	recv              func(buf, count uintptr, dtype DataType, peer int32, comm, stream uintptr) int32
	groupStart        func() int32
	groupEnd          func() int32
}

func (f *ncclFuncs) register(h uintptr) error {
	for _, b := range []struct {
		fn  any
		sym string
	}{
		{&f.getVersion, "ncclGetVersion"},
		{&f.getErrorString, "ncclGetErrorString"},
		{&f.getLastError, "ncclGetLastError"},
		{&f.commInitRank, "ncclCommInitRank"},
		{&f.commAbort, "ncclCommAbort"},
		{&f.commDestroy, "ncclCommDestroy"},
		{&f.commCount, "ncclCommCount"},
		{&f.commUserRank, "ncclCommUserRank"},
		{&f.commGetAsyncError, "ncclCommGetAsyncError"},
		{&f.allReduce, "ncclAllReduce"},
		{&f.allGather, "ncclAllGather"},
		{&f.reduceScatter, "ncclReduceScatter"},
		{&f.broadcast, "ncclBroadcast"},
		{&f.reduce, "ncclReduce"},
		{&f.send, "ncclSend"},
		{&f.recv, "ncclRecv"},
		{&f.groupStart, "ncclGroupStart"},
		{&f.groupEnd, "ncclGroupEnd"},
	} {
		if err := register(h, b.fn, b.sym); err != nil {
			return err
		}
	}
	return nil
}

// NCCLError is a failed NCCL call: the call, NCCL's result code and its
// description, and the last error message NCCL logged, when it has one.
type NCCLError struct {
	Call   string
	Code   int
	Text   string
	Detail string
}

func (e *NCCLError) Error() string {
	s := fmt.Sprintf("%s: %s (nccl error %d)", e.Call, e.Text, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (l *Library) ncclCheck(call string, comm uintptr, rc int32) error {
	if rc == ncclSuccess {
		return nil
	}
	return &NCCLError{Call: call, Code: int(rc), Text: l.nccl.getErrorString(rc), Detail: l.nccl.getLastError(comm)}
}

// NCCLVersion returns the loaded NCCL's version code, e.g. 22809 for 2.28.9.
func (l *Library) NCCLVersion() (int, error) {
	var v int32
	if err := l.ncclCheck("ncclGetVersion", 0, l.nccl.getVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Stream is a cudaStream_t; 0 is the legacy default stream.
type Stream uintptr

// DevicePtr is an address in GPU memory.
type DevicePtr uintptr

// Add offsets p by n bytes.
func (p DevicePtr) Add(n int) DevicePtr { return p + DevicePtr(n) }

// Comm is an NCCL communicator of this process's rank.
type Comm struct {
	lib    *Library
	handle uintptr
}

// CommInitRank joins rank of an nranks-wide communicator bootstrapped from
// id. Every rank passes the same id; the rank that hosts the bootstrap root
// needs NCCL_COMM_ID (muster sets it on global rank 0). The current CUDA
// device must already be set (SetDevice) on this OS thread.
func (l *Library) CommInitRank(id uniqueid.ID, nranks, rank int) (*Comm, error) {
	var h uintptr
	rc := l.nccl.commInitRank(&h, int32(nranks), ncclUniqueIDArg{Internal: id}, int32(rank))
	if err := l.ncclCheck("ncclCommInitRank", 0, rc); err != nil {
		return nil, err
	}
	return &Comm{lib: l, handle: h}, nil
}

// Count is the number of ranks in the communicator.
func (c *Comm) Count() (int, error) {
	var n int32
	if err := c.check("ncclCommCount", c.lib.nccl.commCount(c.handle, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// UserRank is this process's rank in the communicator.
func (c *Comm) UserRank() (int, error) {
	var r int32
	if err := c.check("ncclCommUserRank", c.lib.nccl.commUserRank(c.handle, &r)); err != nil {
		return 0, err
	}
	return int(r), nil
}

// AsyncError reports an error NCCL met in the background (a peer gone, a
// network failure); nil while all is well.
func (c *Comm) AsyncError() error {
	var res int32
	if err := c.check("ncclCommGetAsyncError", c.lib.nccl.commGetAsyncError(c.handle, &res)); err != nil {
		return err
	}
	if res == ncclSuccess || res == ncclInProgress {
		return nil
	}
	return c.lib.ncclCheck("nccl async", c.handle, res)
}

// Destroy frees the communicator after its pending work is done.
func (c *Comm) Destroy() error {
	return c.check("ncclCommDestroy", c.lib.nccl.commDestroy(c.handle))
}

// Abort frees the communicator at once, cancelling pending work; use it
// when a peer may be gone, since Destroy could then wait forever.
func (c *Comm) Abort() error {
	return c.check("ncclCommAbort", c.lib.nccl.commAbort(c.handle))
}

func (c *Comm) check(call string, rc int32) error { return c.lib.ncclCheck(call, c.handle, rc) }

// AllReduce reduces count elements of send across ranks into recv on every rank.
func (c *Comm) AllReduce(send, recv DevicePtr, count int, t DataType, op RedOp, s Stream) error {
	return c.check("ncclAllReduce", c.lib.nccl.allReduce(uintptr(send), uintptr(recv), uintptr(count), t, op, c.handle, uintptr(s)))
}

// AllGather gathers sendCount elements from every rank into recv, ordered by rank.
func (c *Comm) AllGather(send, recv DevicePtr, sendCount int, t DataType, s Stream) error {
	return c.check("ncclAllGather", c.lib.nccl.allGather(uintptr(send), uintptr(recv), uintptr(sendCount), t, c.handle, uintptr(s)))
}

// ReduceScatter reduces send (recvCount elements per rank) and leaves rank
// i's block in recv on rank i.
func (c *Comm) ReduceScatter(send, recv DevicePtr, recvCount int, t DataType, op RedOp, s Stream) error {
	return c.check("ncclReduceScatter", c.lib.nccl.reduceScatter(uintptr(send), uintptr(recv), uintptr(recvCount), t, op, c.handle, uintptr(s)))
}

// Broadcast copies root's send into recv on every rank.
func (c *Comm) Broadcast(send, recv DevicePtr, count int, t DataType, root int, s Stream) error {
	return c.check("ncclBroadcast", c.lib.nccl.broadcast(uintptr(send), uintptr(recv), uintptr(count), t, int32(root), c.handle, uintptr(s)))
}

// Reduce reduces send across ranks into recv on root.
func (c *Comm) Reduce(send, recv DevicePtr, count int, t DataType, op RedOp, root int, s Stream) error {
	return c.check("ncclReduce", c.lib.nccl.reduce(uintptr(send), uintptr(recv), uintptr(count), t, op, int32(root), c.handle, uintptr(s)))
}

// Send sends count elements to peer; pair it with Recv on the peer.
func (c *Comm) Send(buf DevicePtr, count int, t DataType, peer int, s Stream) error {
	return c.check("ncclSend", c.lib.nccl.send(uintptr(buf), uintptr(count), t, int32(peer), c.handle, uintptr(s)))
}

// Recv receives count elements from peer.
func (c *Comm) Recv(buf DevicePtr, count int, t DataType, peer int, s Stream) error {
	return c.check("ncclRecv", c.lib.nccl.recv(uintptr(buf), uintptr(count), t, int32(peer), c.handle, uintptr(s)))
}

// GroupStart begins a group of NCCL calls that are launched together at
// GroupEnd (needed for Send/Recv pairs that would otherwise deadlock).
func (l *Library) GroupStart() error { return l.ncclCheck("ncclGroupStart", 0, l.nccl.groupStart()) }

// GroupEnd launches the calls made since GroupStart.
func (l *Library) GroupEnd() error { return l.ncclCheck("ncclGroupEnd", 0, l.nccl.groupEnd()) }

// WatchAsyncError polls the communicator until ctx ends and returns the first
// background error; a worker runs it beside its work so that a dead peer ends
// the job instead of hanging it.
func (c *Comm) WatchAsyncError(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.AsyncError(); err != nil {
				return err
			}
		}
	}
}
