package engine

import (
	"fmt"
	"runtime"
	"unsafe"
)

// cudaFuncs are the CUDA runtime entry points muster uses.
type cudaFuncs struct {
	getErrorString    func(code int32) string
	setDevice         func(device int32) int32
	getDevice         func(device *int32) int32
	getDeviceCount    func(count *int32) int32
	deviceSynchronize func() int32
	malloc            func(ptr *uintptr, size uintptr) int32
	free              func(ptr uintptr) int32
	memcpy            func(dst, src uintptr, count uintptr, kind int32) int32
	memset            func(ptr uintptr, value int32, count uintptr) int32
	streamCreate      func(stream *uintptr) int32
	streamSynchronize func(stream uintptr) int32
	streamDestroy     func(stream uintptr) int32
	eventCreate       func(event *uintptr) int32
	eventRecord       func(event, stream uintptr) int32
	eventSynchronize  func(event uintptr) int32
	eventElapsedTime  func(ms *float32, start, end uintptr) int32
	eventDestroy      func(event uintptr) int32
	runtimeGetVersion func(version *int32) int32
	driverGetVersion  func(version *int32) int32
}

func (f *cudaFuncs) register(h uintptr) error {
	for _, b := range []struct {
		fn   any
		syms []string
	}{
		{&f.getErrorString, []string{"cudaGetErrorString"}},
		{&f.setDevice, []string{"cudaSetDevice"}},
		{&f.getDevice, []string{"cudaGetDevice"}},
		{&f.getDeviceCount, []string{"cudaGetDeviceCount"}},
		{&f.deviceSynchronize, []string{"cudaDeviceSynchronize"}},
		{&f.malloc, []string{"cudaMalloc"}},
		{&f.free, []string{"cudaFree"}},
		{&f.memcpy, []string{"cudaMemcpy"}},
		{&f.memset, []string{"cudaMemset"}},
		{&f.streamCreate, []string{"cudaStreamCreate"}},
		{&f.streamSynchronize, []string{"cudaStreamSynchronize"}},
		{&f.streamDestroy, []string{"cudaStreamDestroy"}},
		{&f.eventCreate, []string{"cudaEventCreate"}},
		{&f.eventRecord, []string{"cudaEventRecord"}},
		{&f.eventSynchronize, []string{"cudaEventSynchronize"}},
		// CUDA 12.8 added the _v2 form; 13 keeps the old name as well.
		{&f.eventElapsedTime, []string{"cudaEventElapsedTime", "cudaEventElapsedTime_v2"}},
		{&f.eventDestroy, []string{"cudaEventDestroy"}},
		{&f.runtimeGetVersion, []string{"cudaRuntimeGetVersion"}},
		{&f.driverGetVersion, []string{"cudaDriverGetVersion"}},
	} {
		if err := register(h, b.fn, b.syms...); err != nil {
			return err
		}
	}
	return nil
}

// CUDAError is a failed CUDA runtime call.
type CUDAError struct {
	Call string
	Code int
	Text string
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("%s: %s (cuda error %d)", e.Call, e.Text, e.Code)
}

func (l *Library) cudaCheck(call string, rc int32) error {
	if rc == 0 {
		return nil
	}
	return &CUDAError{Call: call, Code: int(rc), Text: l.cuda.getErrorString(rc)}
}

// Event is a cudaEvent_t.
type Event uintptr

// DeviceCount is the number of GPUs this process sees. With no driver or no
// GPU it returns an error, which callers treat as "no GPU here".
func (l *Library) DeviceCount() (int, error) {
	var n int32
	if err := l.cudaCheck("cudaGetDeviceCount", l.cuda.getDeviceCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// SetDevice makes device current for the calling OS thread; callers hold
// runtime.LockOSThread so that later calls run on the same thread.
func (l *Library) SetDevice(device int) error {
	return l.cudaCheck(fmt.Sprintf("cudaSetDevice(%d)", device), l.cuda.setDevice(int32(device)))
}

// Device is the calling thread's current device.
func (l *Library) Device() (int, error) {
	var d int32
	if err := l.cudaCheck("cudaGetDevice", l.cuda.getDevice(&d)); err != nil {
		return 0, err
	}
	return int(d), nil
}

// RuntimeVersion and DriverVersion return CUDA's version codes (13000 = 13.0).
func (l *Library) RuntimeVersion() (int, error) {
	var v int32
	err := l.cudaCheck("cudaRuntimeGetVersion", l.cuda.runtimeGetVersion(&v))
	return int(v), err
}

// DriverVersion is the newest CUDA version the installed driver supports.
func (l *Library) DriverVersion() (int, error) {
	var v int32
	err := l.cudaCheck("cudaDriverGetVersion", l.cuda.driverGetVersion(&v))
	return int(v), err
}

// DeviceSynchronize waits for all work on the current device.
func (l *Library) DeviceSynchronize() error {
	return l.cudaCheck("cudaDeviceSynchronize", l.cuda.deviceSynchronize())
}

// Malloc allocates size bytes of device memory on the current device.
func (l *Library) Malloc(size int) (DevicePtr, error) {
	var p uintptr
	if err := l.cudaCheck(fmt.Sprintf("cudaMalloc(%d)", size), l.cuda.malloc(&p, uintptr(size))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// Free releases memory from Malloc.
func (l *Library) Free(p DevicePtr) error { return l.cudaCheck("cudaFree", l.cuda.free(uintptr(p))) }

// Memset sets size bytes at p to value.
func (l *Library) Memset(p DevicePtr, value byte, size int) error {
	return l.cudaCheck("cudaMemset", l.cuda.memset(uintptr(p), int32(value), uintptr(size)))
}

// CopyToDevice copies src to device memory at dst and waits for the copy.
func (l *Library) CopyToDevice(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	rc := l.cuda.memcpy(uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), memcpyHostToDevice)
	runtime.KeepAlive(src)
	return l.cudaCheck("cudaMemcpy(host to device)", rc)
}

// CopyToHost copies len(dst) bytes from device memory at src into dst.
func (l *Library) CopyToHost(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	rc := l.cuda.memcpy(uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), memcpyDeviceToHost)
	runtime.KeepAlive(dst)
	return l.cudaCheck("cudaMemcpy(device to host)", rc)
}

// StreamCreate makes a stream on the current device.
func (l *Library) StreamCreate() (Stream, error) {
	var s uintptr
	if err := l.cudaCheck("cudaStreamCreate", l.cuda.streamCreate(&s)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// StreamSynchronize waits for the work queued on s.
func (l *Library) StreamSynchronize(s Stream) error {
	return l.cudaCheck("cudaStreamSynchronize", l.cuda.streamSynchronize(uintptr(s)))
}

// StreamDestroy releases s once its work is done.
func (l *Library) StreamDestroy(s Stream) error {
	return l.cudaCheck("cudaStreamDestroy", l.cuda.streamDestroy(uintptr(s)))
}

// EventCreate makes an event for timing and ordering.
func (l *Library) EventCreate() (Event, error) {
	var e uintptr
	if err := l.cudaCheck("cudaEventCreate", l.cuda.eventCreate(&e)); err != nil {
		return 0, err
	}
	return Event(e), nil
}

// EventRecord records e on s.
func (l *Library) EventRecord(e Event, s Stream) error {
	return l.cudaCheck("cudaEventRecord", l.cuda.eventRecord(uintptr(e), uintptr(s)))
}

// EventSynchronize waits until e has happened.
func (l *Library) EventSynchronize(e Event) error {
	return l.cudaCheck("cudaEventSynchronize", l.cuda.eventSynchronize(uintptr(e)))
}

// EventElapsedMs is the time in milliseconds between two recorded events.
func (l *Library) EventElapsedMs(start, end Event) (float32, error) {
	var ms float32
	err := l.cudaCheck("cudaEventElapsedTime", l.cuda.eventElapsedTime(&ms, uintptr(start), uintptr(end)))
	return ms, err
}

// EventDestroy releases e.
func (l *Library) EventDestroy(e Event) error {
	return l.cudaCheck("cudaEventDestroy", l.cuda.eventDestroy(uintptr(e)))
}
