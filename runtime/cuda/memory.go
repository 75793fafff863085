package cuda

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a device address (CUdeviceptr). Adding a byte offset gives the
// address of a sub-buffer.
type DevicePtr uint64

// Elem is the set of element types that can be copied between host slices and
// device memory; bf16 and f16 data travel as uint16.
type Elem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 |
		~float32 | ~float64
}

// Alloc allocates bytes of device memory, aligned to at least 256 bytes. The memory
// is not initialised.
func (d *Device) Alloc(bytes int) (DevicePtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("cuda: Alloc of %d bytes: want a positive size", bytes)
	}
	var p DevicePtr
	err := d.do(func() error {
		return cu(cuMemAlloc, fmt.Sprint(bytes, " bytes"), uintptr(unsafe.Pointer(&p)), uintptr(bytes))
	})
	return p, err
}

// Free releases memory from Alloc. Freeing 0 is a no-op.
func (d *Device) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return d.do(func() error { return cu(cuMemFree, "", uintptr(p)) })
}

// CopyHtoD copies src to device memory at dst, synchronously.
func CopyHtoD[T Elem](d *Device, dst DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	n := len(src) * int(unsafe.Sizeof(src[0]))
	d.h2d.Add(int64(n))
	return d.do(func() error {
		return cu(cuMemcpyHtoD, fmt.Sprint(n, " bytes"), uintptr(dst),
			uintptr(unsafe.Pointer(&src[0])), uintptr(n))
	})
}

// CopyDtoH copies len(dst) elements from device memory at src into dst,
// synchronously.
func CopyDtoH[T Elem](d *Device, dst []T, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	n := len(dst) * int(unsafe.Sizeof(dst[0]))
	d.d2h.Add(int64(n))
	return d.do(func() error {
		return cu(cuMemcpyDtoH, fmt.Sprint(n, " bytes"), uintptr(unsafe.Pointer(&dst[0])),
			uintptr(src), uintptr(n))
	})
}

// CopyDtoD copies bytes between device buffers of the device.
func (d *Device) CopyDtoD(dst, src DevicePtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return d.do(func() error {
		return cu(cuMemcpyDtoD, fmt.Sprint(bytes, " bytes"), uintptr(dst), uintptr(src), uintptr(bytes))
	})
}

// Memset32 sets count 32-bit words at p to value (e.g. math.Float32bits(x) to fill
// with a float, or a NaN pattern to poison an output), and returns once they are
// set: cuMemsetD32 runs on the legacy stream, which does not order itself with
// lcc's non-blocking streams, so without the wait a copy or kernel queued next on
// one of them could run first. (Stream.Memset8 is the stream-ordered form.)
func (d *Device) Memset32(p DevicePtr, value uint32, count int) error {
	if count == 0 {
		return nil
	}
	if p%4 != 0 {
		return fmt.Errorf("cuda: Memset32 at %#x: address not 4-byte aligned", uint64(p))
	}
	return d.do(func() error {
		if err := cu(cuMemsetD32, fmt.Sprint(count, " words"), uintptr(p), uintptr(value), uintptr(count)); err != nil {
			return err
		}
		return cu(cuCtxSynchronize, "")
	})
}

// Memset8 sets count bytes at p to value and returns once they are set (see
// Memset32).
func (d *Device) Memset8(p DevicePtr, value byte, count int) error {
	if count == 0 {
		return nil
	}
	return d.do(func() error {
		if err := cu(cuMemsetD8, fmt.Sprint(count, " bytes"), uintptr(p), uintptr(value), uintptr(count)); err != nil {
			return err
		}
		return cu(cuCtxSynchronize, "")
	})
}
