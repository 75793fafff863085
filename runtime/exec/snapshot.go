package exec

import (
	"errors"
	"fmt"
	"time"

	"github.com/lcc-dev/lcc/runtime/cuda"
)

// Snapshot is a copy of an Optimizer's state (fp32 masters, first and second
// moments) on its way to pinned host memory, for a checkpoint taken while
// training goes on. The copy runs on the optimizer's copy stream, so the
// session's stream starts the next step at once; it reads either a staging
// copy made on the device first (a device-to-device copy at memory bandwidth,
// costing 12 bytes per trained element until Release) or, without staging, the
// state itself, and then the next update waits for the copy to finish
// (cuStreamWaitEvent), so no update overwrites state before it is copied.
//
// A Snapshot's fields do not change after Optimizer.Snapshot returns: Wait,
// Done, Times and Raw may run on another goroutine than the training loop;
// Release belongs to the loop.
type Snapshot struct {
	// o is the resident optimizer whose state is copied; nil for a
	// HostOptimizer's Snapshot, whose copy (by the CPU, hostCopy long) is done
	// when it is returned.
	o        *Optimizer
	hostCopy time.Duration
	host     *cuda.HostBuffer
	// sizes are the elements per trained weight, total their sum.
	sizes   []int64
	total   int64
	staging cuda.DevicePtr // 0: the copy reads the state itself
	// start, ready and done are recorded before the staging copy, after it
	// and after the copy to the host.
	start, ready, done *cuda.Event
	// pending holds the pieces of a staged copy not queued yet (Pump queues
	// them); queued is closed once every piece is queued and done recorded.
	pending []snapPiece
	queued  chan struct{}
}

// snapPiece is one device-to-host copy of a Snapshot: n bytes from src into
// the host buffer at off.
type snapPiece struct {
	off int
	src cuda.DevicePtr
	n   int
}

// SnapshotPumpBytes is how much of a staged Snapshot's copy one Pump queues:
// about 5 ms of the host link, so that a step's own small downloads (the loss,
// the norm) at its end find the copy engine idle rather than queue behind the
// whole state.
const SnapshotPumpBytes = 256 << 20

// SnapshotBytes is the size of the pinned host buffer a Snapshot fills: the
// masters, then the first moments, then the second moments, fp32, flat.
func (o *Optimizer) SnapshotBytes() int { return int(12 * o.total) }

// Snapshot queues a copy of the state, as the work queued so far leaves it,
// into host (at least SnapshotBytes long) and returns without waiting. With
// stage it first tries to copy the state into a staging allocation on the
// device; when that allocation fails (or without stage) the next Step's update
// waits for the copy instead. One Snapshot may be outstanding: Release it
// before the next.
func (o *Optimizer) Snapshot(host *cuda.HostBuffer, stage bool) (*Snapshot, error) {
	s := o.b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case o.snap != nil:
		return nil, errors.New("exec: optimizer snapshot: the previous one is not released")
	case host == nil || host.Len() < o.SnapshotBytes():
		return nil, fmt.Errorf("exec: optimizer snapshot: want a pinned buffer of %d bytes", o.SnapshotBytes())
	}
	if err := o.copyStream(); err != nil {
		return nil, fmt.Errorf("exec: optimizer snapshot: %w", err)
	}
	n := int(4 * o.total)
	src := []cuda.DevicePtr{o.master, o.m, o.v}
	snap := &Snapshot{o: o, host: host, sizes: o.sizes, total: o.total, start: o.copyStart, ready: o.copyReady, done: o.copyDone,
		queued: make(chan struct{})}
	if stage {
		// An allocation that fails (no room) is no error: the copy then reads
		// the state itself and the next update waits for it.
		if p, err := o.dev.Alloc(3 * n); err == nil {
			snap.staging = p
		}
	}
	if err := o.copyStart.Record(s.stream); err != nil {
		if snap.staging != 0 {
			o.dev.Free(snap.staging)
		}
		return nil, fmt.Errorf("exec: optimizer snapshot: %w", err)
	}
	if snap.staging != 0 {
		for i, p := range src {
			dst := snap.staging + cuda.DevicePtr(i*n)
			if err := s.stream.CopyDtoDAsync(dst, p, n); err != nil {
				o.dev.Free(snap.staging)
				return nil, fmt.Errorf("exec: optimizer snapshot: %w", err)
			}
			src[i] = dst
		}
	}
	err := o.copyReady.Record(s.stream)
	if err == nil {
		err = o.copy.Wait(o.copyReady)
	}
	for i, p := range src {
		for off := 0; off < n; off += snapshotPiece {
			snap.pending = append(snap.pending, snapPiece{i*n + off, p + cuda.DevicePtr(off), min(snapshotPiece, n-off)})
		}
	}
	// A staged copy is queued a SnapshotPumpBytes at a time, now and at each
	// Pump (after each step); a copy of the live state is queued whole, since
	// the next update waits for its done event.
	if err == nil {
		budget := SnapshotPumpBytes
		if snap.staging == 0 {
			budget = 3 * n
		}
		err = snap.queue(budget)
	}
	if err != nil {
		if snap.staging != 0 {
			o.copy.Synchronize()
			o.dev.Free(snap.staging)
		}
		return nil, fmt.Errorf("exec: optimizer snapshot: %w", err)
	}
	if snap.staging == 0 {
		o.pending = o.copyDone
	}
	o.snap = snap
	return snap, nil
}

// queue queues pending pieces up to bytes (at least one), and records done
// and closes queued after the last. The session's lock is held.
func (sn *Snapshot) queue(bytes int) error {
	for q := 0; len(sn.pending) > 0 && q < bytes; {
		pc := sn.pending[0]
		if err := sn.o.copy.CopyDtoHAsync(sn.host, pc.off, pc.src, pc.n); err != nil {
			return err
		}
		sn.pending, q = sn.pending[1:], q+pc.n
	}
	if len(sn.pending) > 0 {
		return nil
	}
	select {
	case <-sn.queued:
		return nil
	default:
	}
	if err := sn.done.Record(sn.o.copy); err != nil {
		return err
	}
	close(sn.queued)
	return nil
}

// Pump queues the next SnapshotPumpBytes of a staged copy; call it after each
// step while the Snapshot is outstanding.
func (sn *Snapshot) Pump() error { return sn.pump(SnapshotPumpBytes) }

// Flush queues whatever is left of the copy.
func (sn *Snapshot) Flush() error { return sn.pump(int(^uint(0) >> 1)) }

func (sn *Snapshot) pump(bytes int) error {
	if sn.o == nil {
		return nil
	}
	s := sn.o.b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := sn.queue(bytes); err != nil {
		return fmt.Errorf("exec: optimizer snapshot: %w", err)
	}
	return nil
}

// snapshotPiece is the size of one queued device-to-host copy of a Snapshot.
const snapshotPiece = 64 << 20

// copyStream creates the copy stream and its events on first use.
func (o *Optimizer) copyStream() error {
	if o.copy != nil {
		return nil
	}
	var err error
	for _, e := range []**cuda.Event{&o.copyStart, &o.copyReady, &o.copyDone} {
		if err == nil {
			*e, err = o.dev.NewEvent()
		}
	}
	if err == nil {
		o.copy, err = o.dev.NewStream()
	}
	return err
}

// Staged says whether the copy reads a staging copy on the device (then the
// next update does not wait for it).
func (sn *Snapshot) Staged() bool { return sn.staging != 0 }

// Wait blocks until the state is in host memory; an error of the copy (or of
// the work before it) is returned.
// Pieces not queued yet are queued by Pump, Flush or Release on the training
// goroutine: Wait on another goroutine blocks until they are.
func (sn *Snapshot) Wait() error {
	<-sn.queued
	if sn.done == nil {
		return nil
	}
	return sn.done.Synchronize()
}

// Done reports, without blocking, whether the state is in host memory.
func (sn *Snapshot) Done() (bool, error) {
	select {
	case <-sn.queued:
		if sn.done == nil {
			return true, nil
		}
		return sn.done.Done()
	default:
		return false, nil
	}
}

// Times returns, once the copy is done, the GPU time of the staging copy on
// the device (0 without one) and of the copy to the host.
func (sn *Snapshot) Times() (stage, copy time.Duration, err error) {
	if sn.o == nil {
		return 0, sn.hostCopy, nil
	}
	if stage, err = sn.ready.Since(sn.start); err == nil {
		copy, err = sn.done.Since(sn.ready)
	}
	return stage, copy, err
}

// Raw returns the copied state (call Wait first) as the little-endian fp32
// bytes of one tensor per trained weight in spec order, for masters and
// moments: the bytes of Optimizer.Save's tensors. They are the pinned
// buffer's, valid until it is reused or freed.
func (sn *Snapshot) Raw() (master, m, v [][]byte) {
	raw := sn.host.Bytes()
	split := func(off int64) [][]byte {
		out := make([][]byte, len(sn.sizes))
		for i, n := range sn.sizes {
			out[i] = raw[4*off : 4*(off+n) : 4*(off+n)]
			off += n
		}
		return out
	}
	return split(0), split(sn.total), split(2 * sn.total)
}

// Release waits for the copy and frees the staging memory, so that the next
// Snapshot may start. The host buffer is the caller's again once it has read it.
func (sn *Snapshot) Release() error {
	o := sn.o
	if o == nil || o.snap != sn {
		return nil
	}
	err := sn.Flush()
	if err == nil {
		err = sn.Wait()
	}
	if sn.staging != 0 {
		err = errors.Join(err, o.dev.Free(sn.staging))
	}
	o.snap = nil
	return err
}
