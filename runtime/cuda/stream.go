package cuda

import (
	"errors"
	"time"
	"unsafe"
)

// Stream is a CUDA stream: work queued on it runs in order. A nil *Stream means the
// legacy default stream, which synchronises with every other blocking stream.
type Stream struct {
	dev    *Device
	handle uintptr // CUstream
}

var errNilStream = errors.New("cuda: nil Stream (the default stream) has no device; " +
	"use Device.Synchronize or a stream from Device.NewStream")

// streamNonBlocking is CU_STREAM_NON_BLOCKING: no implicit sync with stream 0.
const streamNonBlocking = 1

// NewStream creates a stream that does not synchronise with the default stream.
func (d *Device) NewStream() (*Stream, error) {
	s := &Stream{dev: d}
	err := d.do(func() error {
		return cu(cuStreamCreate, "", uintptr(unsafe.Pointer(&s.handle)), streamNonBlocking)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Handle returns the CUstream (0 for a nil Stream), for libraries that take one.
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return s.handle
}

// Synchronize waits for all work queued on s. A nil Stream knows no device: use
// Device.Synchronize to wait for the default stream.
func (s *Stream) Synchronize() error {
	if s == nil {
		return errNilStream
	}
	return s.dev.do(func() error { return cu(cuStreamSynchronize, "", s.handle) })
}

// Wait makes work queued on s after this call wait until e has completed; the host
// does not block. This is how an NCCL stream and a compute stream overlap.
func (s *Stream) Wait(e *Event) error {
	if s == nil {
		return errNilStream
	}
	return s.dev.do(func() error { return cu(cuStreamWaitEvent, "", s.handle, e.handle, 0) })
}

// Destroy releases the stream once its queued work completes.
func (s *Stream) Destroy() error {
	if s == nil || s.handle == 0 {
		return nil
	}
	err := s.dev.do(func() error { return cu(cuStreamDestroy, "", s.handle) })
	s.handle = 0
	return err
}

// Event marks a point in a stream, for timing and for cross-stream waits.
type Event struct {
	dev    *Device
	handle uintptr // CUevent
}

// NewEvent creates an event that records timing (CU_EVENT_DEFAULT).
func (d *Device) NewEvent() (*Event, error) {
	e := &Event{dev: d}
	err := d.do(func() error { return cu(cuEventCreate, "", uintptr(unsafe.Pointer(&e.handle)), 0) })
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Record queues the event on s (nil for the default stream).
func (e *Event) Record(s *Stream) error {
	return e.dev.do(func() error { return cu(cuEventRecord, "", e.handle, s.Handle()) })
}

// Synchronize blocks until the work recorded before the event has completed.
func (e *Event) Synchronize() error {
	return e.dev.do(func() error { return cu(cuEventSynchronize, "", e.handle) })
}

// Done reports, without blocking, whether the work recorded before the event has
// completed (cuEventQuery); a failure of that work is an error. Watchdogs poll it.
func (e *Event) Done() (bool, error) {
	var done bool
	err := e.dev.do(func() error {
		r, err := cuEventQuery.call(e.handle)
		if err != nil {
			return err
		}
		switch code := int32(r); code {
		case cudaSuccess:
			done = true
		case cudaErrorNotReady:
		default:
			return driverError(cuEventQuery.name, "", code)
		}
		return nil
	})
	return done, err
}

// Since returns the GPU time between start and e, both recorded and completed
// (call e.Synchronize first). The driver's resolution is about half a microsecond.
func (e *Event) Since(start *Event) (time.Duration, error) {
	var ms float32
	err := e.dev.do(func() error {
		return cu(cuEventElapsedTime, "", uintptr(unsafe.Pointer(&ms)), start.handle, e.handle)
	})
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	if e == nil || e.handle == 0 {
		return nil
	}
	err := e.dev.do(func() error { return cu(cuEventDestroy, "", e.handle) })
	e.handle = 0
	return err
}

// Mark creates an event and records it after the work queued on s so far: the
// point another stream Waits on. The caller destroys it.
func (s *Stream) Mark() (*Event, error) {
	if s == nil {
		return nil, errNilStream
	}
	ev, err := s.dev.NewEvent()
	if err != nil {
		return nil, err
	}
	if err := ev.Record(s); err != nil {
		ev.Destroy()
		return nil, err
	}
	return ev, nil
}
