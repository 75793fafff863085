package cuda

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// HostBuffer is page-locked (pinned) host memory from cuMemHostAlloc. Copies
// between it and the device run asynchronously on a stream at the link's full
// speed, which pageable Go memory cannot: the driver would stage it.
type HostBuffer struct {
	dev  *Device
	ptr  unsafe.Pointer // outside the Go heap
	size int
}

// pinned counts the page-locked bytes this process holds from AllocHost, now
// and at most: lcc train prints them beside the planned host peak. Portable
// buffers belong to the process, not to a device, so the count is too.
var pinned struct{ live, peak atomic.Int64 }

// PinnedBytes returns the pinned host bytes AllocHost has allocated and not
// freed, and the most it held at once.
func PinnedBytes() (live, peak int64) { return pinned.live.Load(), pinned.peak.Load() }

// countPinned adds n (negative: freed) to the pinned count.
func countPinned(n int64) {
	live := pinned.live.Add(n)
	for {
		p := pinned.peak.Load()
		if live <= p || pinned.peak.CompareAndSwap(p, live) {
			return
		}
	}
}

// hostAllocPortable is CU_MEMHOSTALLOC_PORTABLE: the buffer is pinned for every
// context, so one buffer serves every rank's GPU in the process.
const hostAllocPortable = 1

// AllocHost allocates bytes of pinned host memory. It is not initialised.
func (d *Device) AllocHost(bytes int) (*HostBuffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: AllocHost of %d bytes: want a positive size", bytes)
	}
	h := &HostBuffer{dev: d, size: bytes}
	err := d.do(func() error {
		return cu(cuMemHostAlloc, fmt.Sprint(bytes, " pinned bytes"), uintptr(unsafe.Pointer(&h.ptr)),
			uintptr(bytes), hostAllocPortable)
	})
	if err != nil {
		return nil, err
	}
	countPinned(int64(bytes))
	return h, nil
}

// Len is the buffer's size in bytes.
func (h *HostBuffer) Len() int { return h.size }

// Bytes is the buffer as a Go slice. Do not read it while a copy into it is in
// flight, nor keep it after Free.
func (h *HostBuffer) Bytes() []byte {
	return unsafe.Slice((*byte)(h.ptr), h.size)
}

// Free releases the buffer once no copy uses it (synchronise first). Freeing a
// nil or freed buffer is a no-op.
func (h *HostBuffer) Free() error {
	if h == nil || h.ptr == nil {
		return nil
	}
	p, n := h.ptr, h.size
	h.ptr, h.size = nil, 0
	countPinned(-int64(n))
	return h.dev.do(func() error { return cu(cuMemFreeHost, "", uintptr(p)) })
}

// span checks that [off, off+bytes) lies inside h.
func (h *HostBuffer) span(off, bytes int) error {
	if h == nil || h.ptr == nil {
		return fmt.Errorf("cuda: copy with a freed or nil HostBuffer")
	}
	if off < 0 || bytes < 0 || off+bytes > h.size {
		return fmt.Errorf("cuda: copy of %d bytes at offset %d outside a %d-byte HostBuffer", bytes, off, h.size)
	}
	return nil
}

// CopyDtoHAsync queues a copy of bytes from device memory at src into h at offset
// off on s. It returns before the copy is done: record an event after it, and
// wait for the event before reading h.
func (s *Stream) CopyDtoHAsync(h *HostBuffer, off int, src DevicePtr, bytes int) error {
	if s == nil {
		return errNilStream
	}
	if err := h.span(off, bytes); err != nil || bytes == 0 {
		return err
	}
	s.dev.d2h.Add(int64(bytes))
	return s.dev.do(func() error {
		return cu(cuMemcpyDtoHAsync, fmt.Sprint(bytes, " bytes"), uintptr(h.ptr)+uintptr(off), uintptr(src),
			uintptr(bytes), s.handle)
	})
}

// CopyHtoDAsync queues a copy of bytes from h at offset off to device memory at
// dst on s. h must not change until the copy is done.
func (s *Stream) CopyHtoDAsync(dst DevicePtr, h *HostBuffer, off int, bytes int) error {
	if s == nil {
		return errNilStream
	}
	if err := h.span(off, bytes); err != nil || bytes == 0 {
		return err
	}
	s.dev.h2d.Add(int64(bytes))
	return s.dev.do(func() error {
		return cu(cuMemcpyHtoDAsync, fmt.Sprint(bytes, " bytes"), uintptr(dst), uintptr(h.ptr)+uintptr(off),
			uintptr(bytes), s.handle)
	})
}

// CopyDtoDAsync queues a copy of bytes between device buffers on s.
func (s *Stream) CopyDtoDAsync(dst, src DevicePtr, bytes int) error {
	return s.asyncBytes(cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), bytes)
}

// Memset8 queues setting count bytes at p to value on s, in order with the
// stream's other work.
func (s *Stream) Memset8(p DevicePtr, value byte, count int) error {
	return s.asyncBytes(cuMemsetD8Async, uintptr(p), uintptr(value), count)
}

// asyncBytes queues fn(a, b, bytes, s) on s; nothing for 0 bytes.
func (s *Stream) asyncBytes(fn *symbol, a, b uintptr, bytes int) error {
	if s == nil {
		return errNilStream
	}
	if bytes == 0 {
		return nil
	}
	return s.dev.do(func() error {
		return cu(fn, fmt.Sprint(bytes, " bytes"), a, b, uintptr(bytes), s.handle)
	})
}
