package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// libcuda is the driver API. Only libcuda.so.1 is tried: the unversioned name
// belongs to the toolkit's stub library, which loads but fails every call.
var libcuda = newLibrary("libcuda", EnvCUDALib, func(c config) string { return c.cudaLib },
	"libcuda.so.1")

// Driver entry points. The _v2 names are the ones the CUDA headers map the plain
// names to since CUDA 3.2/4.0; the plain ones keep the 32-bit ABI.
var (
	cuInit                    = libcuda.sym("cuInit")
	cuDriverGetVersion        = libcuda.sym("cuDriverGetVersion")
	cuGetErrorString          = libcuda.sym("cuGetErrorString")
	cuGetErrorName            = libcuda.sym("cuGetErrorName")
	cuDeviceGetCount          = libcuda.sym("cuDeviceGetCount")
	cuDeviceGet               = libcuda.sym("cuDeviceGet")
	cuDeviceGetName           = libcuda.sym("cuDeviceGetName")
	cuDeviceGetAttribute      = libcuda.sym("cuDeviceGetAttribute")
	cuDeviceTotalMem          = libcuda.sym("cuDeviceTotalMem_v2")
	cuDevicePrimaryCtxRetain  = libcuda.sym("cuDevicePrimaryCtxRetain")
	cuDevicePrimaryCtxRelease = libcuda.sym("cuDevicePrimaryCtxRelease_v2")
	cuCtxCreate               = libcuda.sym("cuCtxCreate_v2")
	cuCtxSetCurrent           = libcuda.sym("cuCtxSetCurrent")
	cuCtxSynchronize          = libcuda.sym("cuCtxSynchronize")
	cuMemGetInfo              = libcuda.sym("cuMemGetInfo_v2")
	cuMemAlloc                = libcuda.sym("cuMemAlloc_v2")
	cuMemFree                 = libcuda.sym("cuMemFree_v2")
	cuMemcpyHtoD              = libcuda.sym("cuMemcpyHtoD_v2")
	cuMemcpyDtoH              = libcuda.sym("cuMemcpyDtoH_v2")
	cuMemcpyDtoD              = libcuda.sym("cuMemcpyDtoD_v2")
	cuMemsetD8                = libcuda.sym("cuMemsetD8_v2")
	cuMemsetD32               = libcuda.sym("cuMemsetD32_v2")
	cuMemsetD8Async           = libcuda.sym("cuMemsetD8Async")
	cuMemHostAlloc            = libcuda.sym("cuMemHostAlloc")
	cuMemFreeHost             = libcuda.sym("cuMemFreeHost")
	cuMemcpyHtoDAsync         = libcuda.sym("cuMemcpyHtoDAsync_v2")
	cuMemcpyDtoHAsync         = libcuda.sym("cuMemcpyDtoHAsync_v2")
	cuMemcpyDtoDAsync         = libcuda.sym("cuMemcpyDtoDAsync_v2")
	cuModuleLoadData          = libcuda.sym("cuModuleLoadData")
	cuModuleUnload            = libcuda.sym("cuModuleUnload")
	cuModuleGetFunction       = libcuda.sym("cuModuleGetFunction")
	cuFuncGetParamInfo        = libcuda.sym("cuFuncGetParamInfo")  // CUDA 12.4+, optional
	cuFuncGetParamCount       = libcuda.sym("cuFuncGetParamCount") // optional, as above
	cuFuncSetAttribute        = libcuda.sym("cuFuncSetAttribute")
	cuLaunchKernel            = libcuda.sym("cuLaunchKernel")
	cuStreamCreate            = libcuda.sym("cuStreamCreate")
	cuStreamDestroy           = libcuda.sym("cuStreamDestroy_v2")
	cuStreamSynchronize       = libcuda.sym("cuStreamSynchronize")
	cuStreamWaitEvent         = libcuda.sym("cuStreamWaitEvent")
	cuEventCreate             = libcuda.sym("cuEventCreate")
	cuEventDestroy            = libcuda.sym("cuEventDestroy_v2")
	cuEventRecord             = libcuda.sym("cuEventRecord")
	cuEventSynchronize        = libcuda.sym("cuEventSynchronize")
	cuEventElapsedTime        = libcuda.sym("cuEventElapsedTime")
	cuEventQuery              = libcuda.sym("cuEventQuery")
)

// driverSymbols lists every driver entry point; a GPU test resolves them all so a
// misspelt name fails in CI rather than at the first use in a long run.
// cuCtxCreate_v2 is bound for tools that want a private context; Device uses the
// primary context instead, see the package comment.
var driverSymbols = []*symbol{cuInit, cuDriverGetVersion, cuGetErrorString, cuGetErrorName,
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute, cuDeviceTotalMem,
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxCreate, cuCtxSetCurrent,
	cuCtxSynchronize, cuMemGetInfo, cuMemAlloc, cuMemFree, cuMemcpyHtoD, cuMemcpyDtoH,
	cuMemcpyDtoD, cuMemsetD8, cuMemsetD32, cuMemsetD8Async, cuMemHostAlloc, cuMemFreeHost, cuMemcpyHtoDAsync,
	cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuModuleLoadData, cuModuleUnload,
	cuModuleGetFunction, cuFuncSetAttribute, cuLaunchKernel, cuStreamCreate,
	cuStreamDestroy, cuStreamSynchronize, cuStreamWaitEvent, cuEventCreate, cuEventDestroy,
	cuEventRecord, cuEventSynchronize, cuEventElapsedTime, cuEventQuery}

// CUresult values this package tests for.
const (
	cudaSuccess           = 0
	cudaErrorInvalidValue = 1
	cudaErrorNoDevice     = 100
	cudaErrorNotReady     = 600
)

// CUdevice_attribute values.
const (
	attrMaxSharedPerBlockOptin = 97
	attrMultiprocessorCount    = 16
	attrComputeCapMajor        = 75
	attrComputeCapMinor        = 76
)

// Error is a failed call into one of the CUDA libraries: the library, the function,
// what it was asked, and the library's status code and message.
type Error struct {
	Lib  string // "libcuda", "libnvrtc", "libcublasLt", "libnccl"
	Func string // the C function, e.g. "cuMemAlloc_v2"
	What string // the arguments that matter, e.g. "1073741824 bytes"; may be ""
	Code int    // the library's status code
	Msg  string // the library's name and description of Code
}

// Error formats the call, its arguments and the library's message.
func (e *Error) Error() string {
	what := ""
	if e.What != "" {
		what = "(" + e.What + ")"
	}
	return fmt.Sprintf("cuda: %s%s: %s (%s status %d)", e.Func, what, e.Msg, e.Lib, e.Code)
}

// driverError describes CUresult code, asking the driver for its name and text.
func driverError(fn, what string, code int32) error {
	msg := "unknown error"
	var name, text uintptr
	r, err := cuGetErrorName.call(uintptr(code), uintptr(unsafe.Pointer(&name)))
	if err == nil && int32(r) == cudaSuccess {
		msg = goString(name)
	}
	r, err = cuGetErrorString.call(uintptr(code), uintptr(unsafe.Pointer(&text)))
	if err == nil && int32(r) == cudaSuccess {
		msg += ": " + goString(text)
	}
	return &Error{Lib: "libcuda", Func: fn, What: what, Code: int(code), Msg: msg}
}

// cu calls a driver entry point and turns a load failure or a non-zero CUresult into
// an error; what describes the arguments for the message.
//
//go:uintptrescapes
func cu(s *symbol, what string, args ...uintptr) error {
	r, err := s.call(args...)
	if err != nil {
		return err
	}
	if code := int32(r); code != cudaSuccess {
		return driverError(s.name, what, code)
	}
	return nil
}

var (
	initOnce sync.Once
	initErr  error
)

// Init loads libcuda and initialises the driver, once per process. Every other
// driver function calls it; it is exported so a caller can ask "is there a usable
// GPU?" without opening one.
func Init() error {
	initOnce.Do(func() { initErr = cu(cuInit, "", 0) })
	return initErr
}

// DeviceCount returns the number of CUDA devices, or an error if the driver cannot
// be loaded or initialised.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n int32
	if err := cu(cuDeviceGetCount, "", uintptr(unsafe.Pointer(&n))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DriverVersion returns the driver's CUDA version as 1000*major + 10*minor.
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v int32
	if err := cu(cuDriverGetVersion, "", uintptr(unsafe.Pointer(&v))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DriverLibrary loads libcuda, without initialising it (cuDriverGetVersion needs
// no cuInit, so a machine whose driver sees no GPU still answers), and returns
// the path it was opened by and the driver's CUDA version (1000*major + 10*minor).
// The error matches ErrUnavailable when no libcuda loads (NoDriver tells).
func DriverLibrary() (path string, version int, err error) {
	var v int32
	if err := cu(cuDriverGetVersion, "", uintptr(unsafe.Pointer(&v))); err != nil {
		return "", 0, err
	}
	return libcuda.path, int(v), nil
}

// NoDriver reports whether err says that no CUDA driver library could be found by
// its usual names (not one that an override variable named).
func NoDriver(err error) bool {
	var le *LibraryError
	return errors.As(err, &le) && le.Lib == libcuda.name && le.Override == ""
}

// Device is one GPU and its primary context. Its methods may be called from any
// goroutine; each makes the context current on the calling thread for its duration.
type Device struct {
	ordinal int
	dev     int32   // CUdevice
	ctx     uintptr // CUcontext, the primary context
	name    string
	ccMajor int
	ccMinor int
	sms     int
	total   uint64
	// h2d and d2h count the bytes every copy between host and device moved
	// (CopyHtoD, CopyDtoH): see Transferred.
	h2d, d2h atomic.Int64
}

// Transferred returns the bytes copied host to device and device to host on d
// since it was opened, by every CopyHtoD and CopyDtoH. A training loop reads it
// around a step to count that step's host traffic.
func (d *Device) Transferred() (h2d, d2h int64) { return d.h2d.Load(), d.d2h.Load() }

// Open initialises the driver and retains the primary context of GPU ordinal. It
// returns an error, never panics, when libcuda is missing, the driver fails to
// initialise, or ordinal is not a device. Close releases the context.
func Open(ordinal int) (*Device, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: no device %d: the driver reports %d device(s)", ordinal, n)
	}
	d := &Device{ordinal: ordinal}
	if err := cu(cuDeviceGet, fmt.Sprint("ordinal ", ordinal),
		uintptr(unsafe.Pointer(&d.dev)), uintptr(ordinal)); err != nil {
		return nil, err
	}
	name := make([]byte, 256)
	if err := cu(cuDeviceGetName, "", uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)),
		uintptr(d.dev)); err != nil {
		return nil, err
	}
	d.name = goString(uintptr(unsafe.Pointer(&name[0])))
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrComputeCapMajor, &d.ccMajor}, {attrComputeCapMinor, &d.ccMinor},
		{attrMultiprocessorCount, &d.sms}} {
		v, err := d.attribute(a.attr)
		if err != nil {
			return nil, err
		}
		*a.dst = v
	}
	var total uint64
	if err := cu(cuDeviceTotalMem, "", uintptr(unsafe.Pointer(&total)), uintptr(d.dev)); err != nil {
		return nil, err
	}
	d.total = total
	if err := cu(cuDevicePrimaryCtxRetain, fmt.Sprint("device ", ordinal),
		uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev)); err != nil {
		return nil, err
	}
	return d, nil
}

// attribute reads a CUdevice_attribute.
func (d *Device) attribute(attr int) (int, error) {
	var v int32
	if err := cu(cuDeviceGetAttribute, fmt.Sprint("attribute ", attr),
		uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(d.dev)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Close releases the primary context. Memory, streams and modules of the device
// must not be used afterwards.
func (d *Device) Close() error {
	if d.ctx == 0 {
		return nil
	}
	err := cu(cuDevicePrimaryCtxRelease, "", uintptr(d.dev))
	d.ctx = 0
	return err
}

// bind locks the goroutine to its thread and makes d's context current there. The
// caller must call the returned function (usually deferred) when done.
func (d *Device) bind() (unbind func(), err error) {
	if d.ctx == 0 {
		return nil, fmt.Errorf("cuda: device %d used after Close", d.ordinal)
	}
	runtime.LockOSThread()
	if err := cu(cuCtxSetCurrent, "", d.ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// do runs f with d's context current on the calling thread.
func (d *Device) do(f func() error) error {
	unbind, err := d.bind()
	if err != nil {
		return err
	}
	defer unbind()
	return f()
}

// Ordinal returns the device's index as the driver numbers devices.
func (d *Device) Ordinal() int { return d.ordinal }

// Name returns the marketing name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.name }

// ComputeCapability returns the major and minor compute capability, e.g. 9, 0.
func (d *Device) ComputeCapability() (major, minor int) { return d.ccMajor, d.ccMinor }

// Arch returns the NVRTC architecture for the device's own code, e.g. "sm_90".
func (d *Device) Arch() string { return fmt.Sprintf("sm_%d%d", d.ccMajor, d.ccMinor) }

// CodegenArch is the architecture programs built for d target: sm_90a on a
// Hopper GPU when an NVRTC that compiles it loads (architecture-specific code:
// flash attention's tier 2), else Arch.
func (d *Device) CodegenArch() string {
	a := d.Arch()
	if a == "sm_90" {
		if _, err := NVRTCFor("sm_90a"); err == nil {
			return "sm_90a"
		}
	}
	return a
}

// KernelArch is the architecture code built for arch compiles for on d: arch
// itself when it is architecture-specific (sm_90a), d's own when arch is "",
// and an error when d cannot run it (code for sm_90a on an sm_80 GPU).
func (d *Device) KernelArch(arch string) (string, error) {
	a, err := ArchOn(d.Arch(), arch)
	if err != nil {
		return "", fmt.Errorf("%w on %s", err, d.Name())
	}
	return a, nil
}

// ArchOn is KernelArch for a device of architecture dev ("sm_90"): a pure
// function, so that the decision of whether a program runs on a GPU can be
// made, and tested, without one.
func ArchOn(dev, arch string) (string, error) {
	if arch == "" {
		return dev, nil
	}
	if strings.TrimRight(arch, "af") != dev {
		return "", fmt.Errorf("cuda: code built for %s does not run on %s", arch, dev)
	}
	return arch, nil
}

// Multiprocessors returns the number of streaming multiprocessors.
func (d *Device) Multiprocessors() int { return d.sms }

// TotalMem returns the device memory in bytes.
func (d *Device) TotalMem() uint64 { return d.total }

// FreeMem returns the free device memory in bytes as the driver sees it now.
func (d *Device) FreeMem() (uint64, error) {
	var free, total uint64
	err := d.do(func() error {
		return cu(cuMemGetInfo, "", uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))
	})
	return free, err
}

// Synchronize waits for all work queued on the device's context.
func (d *Device) Synchronize() error {
	return d.do(func() error { return cu(cuCtxSynchronize, "") })
}
