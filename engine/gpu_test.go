package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/engine/uniqueid"
)

// loadGPU loads the libraries and skips the test where there is no NCCL or
// no GPU, as on CI machines.
func loadGPU(t *testing.T, wantDevices int) *Library {
	t.Helper()
	lib, err := Load(context.Background(), zaptest.NewLogger(t))
	if errors.Is(err, ErrLibraryNotFound) {
		t.Skipf("skipping: no NCCL or CUDA runtime on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := lib.DeviceCount()
	if err != nil || n < wantDevices {
		t.Skipf("skipping: needs %d GPUs, found %d (%v)", wantDevices, n, err)
	}
	return lib
}

// loopbackID mints an ID rooted at a free loopback port and points
// NCCL_COMM_ID at it, as muster does for rank 0.
func loopbackID(t *testing.T) uniqueid.ID {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	root := netip.MustParseAddrPort(l.Addr().String())
	l.Close()
	id, err := uniqueid.New(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NCCL_COMM_ID", root.String())
	t.Setenv("NCCL_NVLS_ENABLE", "0")
	return id
}

// TestGPUAllReduceAcrossDevices runs one rank per GPU, each on its own
// locked OS thread, through the same minted ID: ncclCommInitRank only
// succeeds if the 128-byte ID reaches NCCL intact, by value.
func TestGPUAllReduceAcrossDevices(t *testing.T) {
	lib := loadGPU(t, 1)
	n, _ := lib.DeviceCount()
	n = min(n, 2)
	id := loopbackID(t)
	const count = 1 << 20
	errs := make(chan error, n)
	for rank := range n {
		go func() { errs <- allReduceRank(lib, id, n, rank, count) }()
	}
	timeout := time.After(2 * time.Minute)
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-timeout:
			t.Fatal("ranks did not finish in 2 minutes: the unique ID did not bootstrap")
		}
	}
}

func allReduceRank(lib *Library, id uniqueid.ID, n, rank, count int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := lib.SetDevice(rank); err != nil {
		return err
	}
	comm, err := lib.CommInitRank(id, n, rank)
	if err != nil {
		return err
	}
	defer comm.Destroy()
	if got, err := comm.Count(); err != nil || got != n {
		return fmt.Errorf("rank %d: Count = %d, %v; want %d", rank, got, err, n)
	}
	if got, err := comm.UserRank(); err != nil || got != rank {
		return fmt.Errorf("rank %d: UserRank = %d, %v", rank, got, err)
	}
	stream, err := lib.StreamCreate()
	if err != nil {
		return err
	}
	defer lib.StreamDestroy(stream)
	buf, err := lib.Malloc(4 * count)
	if err != nil {
		return err
	}
	defer lib.Free(buf)
	host := make([]byte, 4*count)
	for i := range count {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(rank*1000+i%13)))
	}
	if err := lib.CopyToDevice(buf, host); err != nil {
		return err
	}
	start, _ := lib.EventCreate()
	end, _ := lib.EventCreate()
	defer lib.EventDestroy(start)
	defer lib.EventDestroy(end)
	if err := lib.EventRecord(start, stream); err != nil {
		return err
	}
	if err := comm.AllReduce(buf, buf, count, Float32, Sum, stream); err != nil {
		return err
	}
	if err := lib.EventRecord(end, stream); err != nil {
		return err
	}
	if err := lib.EventSynchronize(end); err != nil {
		return err
	}
	if ms, err := lib.EventElapsedMs(start, end); err != nil || ms <= 0 {
		return fmt.Errorf("rank %d: elapsed %v ms, %v", rank, ms, err)
	}
	if err := lib.CopyToHost(host, buf); err != nil {
		return err
	}
	for i := range count {
		want := float32(0)
		for r := range n {
			want += float32(r*1000 + i%13)
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:])); got != want {
			return fmt.Errorf("rank %d: element %d = %v, want %v", rank, i, got, want)
		}
	}
	return comm.AsyncError()
}

func TestGPUErrorsAreReadable(t *testing.T) {
	lib := loadGPU(t, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := lib.SetDevice(1 << 20)
	var ce *CUDAError
	if !errors.As(err, &ce) || ce.Text == "" {
		t.Fatalf("SetDevice(huge) = %v, want a CUDAError with text", err)
	}
	v, err := lib.NCCLVersion()
	if err != nil || v < 20000 {
		t.Fatalf("NCCLVersion = %d, %v", v, err)
	}
	lv, err := LibraryNCCLVersion()
	if err != nil || lv != v {
		t.Fatalf("LibraryNCCLVersion = %d, %v; want %d", lv, err, v)
	}
	t.Logf("nccl %s from %s, cudart from %s", VersionString(v), lib.NCCLPath, lib.CUDARTPath)
}
