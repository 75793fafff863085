package exec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// This file is the HostOptimizer's update on the GPU (HostOptimizerSpec.OnDevice),
// the other of #26's two ways to update a state kept in pinned host memory: the
// fp32 masters and moments stream up through two device windows, the resident
// Optimizer's AdamW kernel updates each window where the gradients already are
// and writes the rounded working weights straight into the arena, and the
// window streams back down. Per trained element that is 12 bytes up and 12
// down over the host link and no CPU arithmetic, against the CPU update's 2
// down (the gradient) and 2 up (the weight) beside a pass of the CPU over 28.
// The arithmetic is the resident kernel's, element for element, with the same
// clipping coefficient from the same norm kernels: the masters are bit for bit
// the resident optimizer's.
//
// A window is a run of whole chunks of the optimizer's chunk table
// (codegen.OptimChunks), at most cost.HostStreamWindow elements, which the
// plan counts (cost.HostStreamBytes). Window i uses slot
// i mod 2: its copy up waits until the copy down of window i − 2 (the slot's
// last user) is done, the kernel waits for its copy up, and its copy down for
// the kernel. The copies up and down run on their own streams, so both
// directions of the link are busy at once while the session's stream computes.

// hostStream is the device side of a streamed update.
type hostStream struct {
	adamw, cast *cuda.Function
	// The chunk tables the kernels read beside the norm's (HostOptimizer's gptr,
	// ck, cs, cl): each tensor's working weight and flat state offset.
	wptr, base cuda.DevicePtr
	// slots[s] are a window's master, m and v on the device.
	slots [2][3]cuda.DevicePtr
	// windows are runs of whole chunks: chunks [c0, c1), elements [lo, hi).
	windows []streamWindow
	// up and down copy the windows; upDone, kDone and downDone mark, per slot,
	// its copy up, its kernel and its copy down.
	up, down                *cuda.Stream
	upDone, kDone, downDone [2]*cuda.Event
	scalars                 cuda.DevicePtr
	hostScalars             *cuda.HostBuffer
}

type streamWindow struct {
	c0, c1 int
	lo, hi int64
}

// streamWindows cuts the chunk table into windows of at most limit elements.
func streamWindows(cl []int32, limit int64) []streamWindow {
	var ws []streamWindow
	var w streamWindow
	for c, n := range cl {
		if w.hi-w.lo+int64(n) > limit && w.c1 > w.c0 {
			ws = append(ws, w)
			w = streamWindow{c0: c, c1: c, lo: w.hi, hi: w.hi}
		}
		w.c1, w.hi = c+1, w.hi+int64(n)
	}
	if w.c1 > w.c0 {
		ws = append(ws, w)
	}
	return ws
}

// setupStream loads the update's kernels and allocates the device windows of
// at most window elements, tables and streams (after setup's norm kernels and
// tables).
func (o *HostOptimizer) setupStream(mod *cuda.Module, cl []int32, window int64) error {
	st := &hostStream{}
	o.st = st
	var err error
	if st.adamw, err = mod.Function(codegen.OptimEntry(codegen.OptimAdamWEntry, o.tb.gdt, o.tb.wdt)); err != nil {
		return err
	}
	if st.cast, err = mod.Function(codegen.OptimEntry(codegen.OptimCastEntry, o.tb.gdt, o.tb.wdt)); err != nil {
		return err
	}
	st.windows = streamWindows(cl, window)
	alloc := func(bytes int64) (cuda.DevicePtr, error) { return allocOwned(o.dev, &o.allocs, bytes) }
	win := int64(0)
	for _, w := range st.windows {
		win = max(win, w.hi-w.lo)
	}
	for s := range st.slots {
		for i := range st.slots[s] {
			if st.slots[s][i], err = alloc(4 * max(win, 1)); err != nil {
				return fmt.Errorf("exec: streamed optimizer windows: %w", err)
			}
			// The kernels index the window as the flat state, from element lo
			// on, through the slot's address less 4·lo (streamWindow.at): that
			// address must not wrap.
			if uint64(st.slots[s][i]) < uint64(4*o.tb.total) {
				return fmt.Errorf("exec: streamed optimizer: a device address %#x below the state's %d bytes",
					uint64(st.slots[s][i]), 4*o.tb.total)
			}
		}
	}
	bases, wptrs := o.tb.flat()
	if err := uploadTables(o.dev, &o.allocs, []table{{&st.wptr, wptrs}, {&st.base, bases}}); err != nil {
		return fmt.Errorf("exec: streamed optimizer tables: %w", err)
	}
	if st.scalars, err = alloc(4 * codegen.OptimScalars); err == nil {
		st.hostScalars, err = o.dev.AllocHost(4 * codegen.OptimScalars)
	}
	if err != nil {
		return fmt.Errorf("exec: streamed optimizer scalars: %w", err)
	}
	if st.up, err = o.dev.NewStream(); err == nil {
		st.down, err = o.dev.NewStream()
	}
	for s := range 2 {
		for _, e := range []**cuda.Event{&st.upDone[s], &st.kDone[s], &st.downDone[s]} {
			if err == nil {
				*e, err = o.dev.NewEvent()
			}
		}
	}
	return err
}

// at is slot p's address as the kernels index it: the flat state's element lo
// at the slot's first byte.
func (w streamWindow) at(p cuda.DevicePtr) cuda.DevicePtr { return p - cuda.DevicePtr(4*w.lo) }

// chunks offsets the chunk tables to the window's first chunk.
func (o *HostOptimizer) windowTables(w streamWindow) (ck, cs, cl cuda.DevicePtr) {
	return o.ck + cuda.DevicePtr(4*w.c0), o.cs + cuda.DevicePtr(8*w.c0), o.cl + cuda.DevicePtr(4*w.c0)
}

// streamAll runs fn on the session's stream for each window, the window's
// state copied up before (in slot i mod 2: the masters alone, or with back the
// moments too) and, with back, copied down after; it returns once every copy
// is done.
func (o *HostOptimizer) streamAll(back bool, fn func(w streamWindow, slot [3]cuda.DevicePtr) error) error {
	st, s := o.st, o.b.s
	host := [3]*cuda.HostBuffer{o.master, o.m, o.v}
	up := 1 // the cast reads the masters only
	if back {
		up = 3
	}
	var err error
	for i, w := range st.windows {
		k, n := i%2, int(4*(w.hi-w.lo))
		if i >= 2 && back {
			err = st.up.Wait(st.downDone[k]) // the slot's copy down of window i − 2
		} else if i >= 2 {
			err = st.up.Wait(st.kDone[k])
		}
		for j := 0; j < up && err == nil; j++ {
			err = st.up.CopyHtoDAsync(st.slots[k][j], host[j], int(4*w.lo), n)
		}
		if err == nil {
			err = st.upDone[k].Record(st.up)
		}
		if err == nil {
			err = s.stream.Wait(st.upDone[k])
		}
		if err == nil {
			err = fn(w, st.slots[k])
		}
		if err == nil {
			err = st.kDone[k].Record(s.stream)
		}
		if back {
			if err == nil {
				err = st.down.Wait(st.kDone[k])
			}
			for j := 0; j < 3 && err == nil; j++ {
				err = st.down.CopyDtoHAsync(host[j], int(4*w.lo), st.slots[k][j], n)
			}
			if err == nil {
				err = st.downDone[k].Record(st.down)
			}
		}
		if err != nil {
			break
		}
	}
	// Whatever was queued finishes before the pinned state is read or reused.
	return errors.Join(err, st.up.Synchronize(), st.down.Synchronize(), s.stream.Synchronize())
}

// launchNorm queues the norm and the clipping coefficient (normCoef) on the
// session's stream, with the resident optimizer's kernels: the sums of squares
// a chunk, then one block.
func (o *HostOptimizer) launchNorm() error {
	s := o.b.s
	err := o.sumsq.Launch([3]uint32{uint32(o.nChunks), 1, 1}, optimBlock, 0, s.stream, o.gptr, o.ck, o.cs, o.cl,
		o.partial, float32(1))
	if err == nil {
		err = o.norm.Launch([3]uint32{1, 1, 1}, optimBlock, 0, s.stream, o.partial, int32(o.nChunks), o.maxNorm,
			o.normCoef)
	}
	return err
}

// castOnDevice rounds the loaded masters into the working weights with the
// resident optimizer's cast kernel, a window at a time (Load).
func (o *HostOptimizer) castOnDevice() error {
	return o.streamAll(false, func(w streamWindow, slot [3]cuda.DevicePtr) error {
		ck, cs, cl := o.windowTables(w)
		return o.st.cast.Launch([3]uint32{uint32(w.c1 - w.c0), 1, 1}, optimBlock, 0, o.b.s.stream,
			o.st.wptr, o.st.base, ck, cs, cl, w.at(slot[0]))
	})
}

// stepOnDevice is Step with the update on the GPU: the norm, then the AdamW
// kernel over the windows as they stream through; it returns the norm.
func (o *HostOptimizer) stepOnDevice(h AdamWStep) (float64, error) {
	unlock, err := o.b.s.lockOpen()
	if err != nil {
		return 0, err
	}
	defer unlock()
	t0 := time.Now()
	s, st := o.b.s, o.st
	if s.opts.Poison {
		for i, b := range o.tb.wbufs {
			b.ID = -1
			if err := poisonAt(o.dev, o.tb.wptrs[i], b); err != nil {
				return 0, err
			}
		}
	}
	clip := int32(0)
	if o.maxNorm > 0 {
		clip = 1
	}
	err = s.stream.CopyHtoDAsync(st.scalars, st.hostScalars, 0, putScalars(st.hostScalars, h))
	if err == nil && o.nChunks > 0 {
		err = o.launchNorm()
	}
	if err == nil {
		err = o.streamAll(true, func(w streamWindow, slot [3]cuda.DevicePtr) error {
			ck, cs, cl := o.windowTables(w)
			return st.adamw.Launch([3]uint32{uint32(w.c1 - w.c0), 1, 1}, optimBlock, 0, s.stream, o.gptr, st.wptr,
				st.base, ck, cs, cl, w.at(slot[0]), w.at(slot[1]), w.at(slot[2]), o.normCoef, float32(1), clip,
				st.scalars)
		})
	}
	if err != nil {
		return 0, fmt.Errorf("exec: streamed optimizer step: %w", err)
	}
	o.last = HostSplit{Update: time.Since(t0)}
	if o.nChunks == 0 {
		return 0, nil
	}
	var raw [8]byte
	if err := cuda.CopyDtoH(o.dev, raw[:], o.normCoef); err != nil {
		return 0, fmt.Errorf("exec: streamed optimizer step: downloading the norm: %w", err)
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(raw[:])), nil
}

// closeStream waits for the copies, then frees the streams, events and
// pinned scalars (the device memory is the optimizer's allocs).
func (o *HostOptimizer) closeStream() error {
	st := o.st
	if st == nil {
		return nil
	}
	var errs []error
	for _, c := range []**cuda.Stream{&st.up, &st.down} {
		if *c != nil {
			errs = append(errs, (*c).Synchronize(), (*c).Destroy())
			*c = nil
		}
	}
	for s := range 2 {
		for _, e := range []**cuda.Event{&st.upDone[s], &st.kDone[s], &st.downDone[s]} {
			if *e != nil {
				errs = append(errs, (*e).Destroy())
				*e = nil
			}
		}
	}
	errs = append(errs, st.hostScalars.Free())
	st.hostScalars = nil
	return errors.Join(errs...)
}
