package exec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// Optimizer is AdamW's state of a Bound training step on the device: fp32
// master weights and moments (and gradient sums when accumulating) in flat
// buffers, updated by the fused multi-tensor kernels of codegen/cuda, which
// write the rounded working copy into the weights of the bound function.
type Optimizer struct {
	b       *Bound
	dev     *cuda.Device
	sizes   []int64 // elements per trained weight
	shapes  [][]int64
	total   int64
	nChunks int
	micro   int
	maxNorm float64

	master, m, v, sum, partial, normCoef cuda.DevicePtr
	// scalars holds the step's OptimScalars fp32 values, written before each
	// update; graph is the update captured (nil: launched one by one), graphs
	// the decision (graph.go).
	scalars                            cuda.DevicePtr
	hostScalars                        *cuda.HostBuffer
	graphs                             graphState
	gptr, sptr, wptr, base, ck, cs, cl cuda.DevicePtr
	allocs                             []cuda.DevicePtr
	mods                               []*cuda.Module
	// direct runs on the gradients in the arena (one micro-step), summed on
	// the flat sums (several).
	sumsq, norm, adamw, accum, cast *cuda.Function
	// gsz, asz and wsz are the element sizes of the gradients the norm and
	// AdamW read (the arena's, or the fp32 sums), of the arena's gradients and
	// of the working weights: what the profile's byte counts use.
	gsz, asz, wsz int64
	// wbufs are the working weights' buffers (for poisoning).
	wbufs []codegen.Buffer
	wptrs []cuda.DevicePtr
	// copy is the stream of Snapshot's device-to-host copies; copyStart and
	// copyReady mark the session's stream before and after the staging copy,
	// copyDone the end of the copy to the host. snap is the Snapshot not yet
	// released, and pending, when set, the copy the next update must wait for
	// (a Snapshot without staging).
	copy                           *cuda.Stream
	copyStart, copyReady, copyDone *cuda.Event
	snap                           *Snapshot
	pending                        *cuda.Event
}

// OptimizerSpec says what an Optimizer trains.
type OptimizerSpec struct {
	// Weights are the trained parameters of the bound function and Grads the
	// outputs holding their gradients, in the same order.
	Weights, Grads []string
	// Micro is the number of micro-batches whose gradients a step sums (≥ 1).
	Micro int
	// MaxNorm clips the global gradient norm (0: off).
	MaxNorm float64
}

// NewOptimizer allocates AdamW's state for spec on the device and loads its
// kernels. The state is undefined until Load.
func (b *Bound) NewOptimizer(spec OptimizerSpec) (*Optimizer, error) {
	o := &Optimizer{b: b, dev: b.s.dev, micro: max(spec.Micro, 1), maxNorm: spec.MaxNorm}
	tb, err := b.trainedBuffers(spec)
	if err != nil {
		return nil, err
	}
	o.sizes, o.shapes, o.wbufs, o.wptrs, o.total = tb.sizes, tb.shapes, tb.wbufs, tb.wptrs, tb.total
	gdt, wdt, gptrs := tb.gdt, tb.wdt, tb.gptrs
	gsrc := gdt // what the norm and the update read: the arena's gradients or the f32 sums
	if o.micro > 1 {
		gsrc = "f32"
	}
	o.gsz, o.asz, o.wsz = dtypeSize(gsrc), dtypeSize(gdt), dtypeSize(wdt)
	if err := o.load(gdt, gsrc, wdt); err != nil {
		o.Close()
		return nil, err
	}
	ck, cs, cl := codegen.OptimChunks(o.sizes)
	o.nChunks = len(ck)
	alloc := func(bytes int64) (cuda.DevicePtr, error) { return allocOwned(o.dev, &o.allocs, bytes) }
	for _, p := range []*cuda.DevicePtr{&o.master, &o.m, &o.v} {
		if *p, err = alloc(4 * o.total); err != nil {
			o.Close()
			return nil, fmt.Errorf("exec: optimizer state: %w", err)
		}
	}
	if o.micro > 1 {
		if o.sum, err = alloc(4 * o.total); err != nil {
			o.Close()
			return nil, fmt.Errorf("exec: gradient sums: %w", err)
		}
	}
	if o.partial, err = alloc(8 * int64(o.nChunks)); err == nil {
		if o.normCoef, err = alloc(16); err == nil {
			if o.scalars, err = alloc(4 * codegen.OptimScalars); err == nil {
				o.hostScalars, err = o.dev.AllocHost(4 * codegen.OptimScalars)
			}
		}
	}
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("exec: optimizer scratch: %w", err)
	}
	bases, wptrs := tb.flat()
	sptrs := make([]uint64, len(o.sizes))
	for i, b := range bases {
		sptrs[i] = uint64(o.sum) + uint64(4*b)
	}
	if err := uploadTables(o.dev, &o.allocs, []table{{&o.gptr, gptrs}, {&o.sptr, sptrs}, {&o.wptr, wptrs},
		{&o.base, bases}, {&o.ck, ck}, {&o.cs, cs}, {&o.cl, cl}}); err != nil {
		o.Close()
		return nil, fmt.Errorf("exec: optimizer tables: %w", err)
	}
	return o, nil
}

// table is a chunk table the optimizer kernels read: the device copy of data
// (a slice of fixed-size integers) goes to dst.
type table struct {
	dst  *cuda.DevicePtr
	data any
}

// uploadTables copies each table to a device allocation of its own, owned by
// allocs.
func uploadTables(dev *cuda.Device, allocs *[]cuda.DevicePtr, ts []table) error {
	for _, t := range ts {
		raw, err := binary.Append(nil, binary.LittleEndian, t.data)
		if err == nil {
			*t.dst, err = allocOwned(dev, allocs, int64(len(raw)))
		}
		if err == nil {
			err = cuda.CopyHtoD(dev, *t.dst, raw)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// flat is each trained tensor's first element in the flat state (its base)
// and its working weight's address, in spec order.
func (tb trained) flat() (bases []int64, wptrs []uint64) {
	bases, wptrs = make([]int64, len(tb.sizes)), make([]uint64, len(tb.sizes))
	var off int64
	for i, n := range tb.sizes {
		bases[i], wptrs[i] = off, uint64(tb.wptrs[i])
		off += n
	}
	return bases, wptrs
}

// putScalars writes AdamW's step scalars (codegen.OptimScalars fp32 values,
// the order the kernel reads them) into dst and returns their bytes.
func putScalars(dst *cuda.HostBuffer, h AdamWStep) int {
	sc := []float32{h.Decay, h.OneMinusBeta1, h.Beta2, h.OneMinusBeta2, h.Bc2Sqrt, h.Eps, h.StepSize}
	for i, x := range sc {
		binary.LittleEndian.PutUint32(dst.Bytes()[4*i:], math.Float32bits(x))
	}
	return 4 * len(sc)
}

// trained are the device buffers of an optimizer's weights and gradients, in
// spec order, and their one storage dtype each.
type trained struct {
	sizes    []int64
	shapes   [][]int64
	wbufs    []codegen.Buffer
	wptrs    []cuda.DevicePtr
	gptrs    []uint64
	total    int64
	gdt, wdt string
}

// trainedBuffers finds spec's weights and gradients in the bound function and
// checks that they pair up and share one storage dtype each.
func (b *Bound) trainedBuffers(spec OptimizerSpec) (trained, error) {
	var tb trained
	if len(spec.Weights) == 0 || len(spec.Weights) != len(spec.Grads) {
		return tb, fmt.Errorf("exec: optimizer of %d weights and %d gradients", len(spec.Weights), len(spec.Grads))
	}
	for i, w := range spec.Weights {
		wp, wb, err := b.Buffer(w)
		if err != nil {
			return tb, err
		}
		gp, gb, err := b.Buffer(spec.Grads[i])
		if err != nil {
			return tb, err
		}
		n := shapeElems(wb.Shape)
		if shapeElems(gb.Shape) != n {
			return tb, fmt.Errorf("exec: weight %q has %d elements, its gradient %q %d", w, n,
				spec.Grads[i], shapeElems(gb.Shape))
		}
		if i == 0 {
			tb.gdt, tb.wdt = gb.DType, wb.DType
		}
		if gb.DType != tb.gdt || wb.DType != tb.wdt {
			return tb, fmt.Errorf("exec: weight %q (%s) and gradient %q (%s): the optimizer wants one "+
				"storage for all weights (%s) and all gradients (%s)", w, wb.DType, spec.Grads[i], gb.DType,
				tb.wdt, tb.gdt)
		}
		tb.sizes = append(tb.sizes, n)
		tb.shapes = append(tb.shapes, wb.Shape)
		tb.wbufs = append(tb.wbufs, wb)
		tb.wptrs = append(tb.wptrs, wp)
		tb.gptrs = append(tb.gptrs, uint64(gp))
		tb.total += n
	}
	return tb, nil
}

// load compiles (through the session's cache) and loads the kernels: accum
// reads the arena's gradients (gdt); sumsq and adamw read gsrc; cast and adamw
// write wdt.
func (o *Optimizer) load(gdt, gsrc, wdt string) error {
	get := func(g string) (*cuda.Module, error) {
		k, err := codegen.OptimKernel(g, wdt)
		if err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
		img, err := o.b.s.cache.Get(k.Source, k.Name+".cu", o.dev.Arch(), nil)
		if err != nil {
			return nil, fmt.Errorf("exec: kernel %s: %w", k.Name, err)
		}
		m, err := o.dev.LoadModule(img)
		if err != nil {
			return nil, fmt.Errorf("exec: loading kernel %s: %w", k.Name, err)
		}
		o.mods = append(o.mods, m)
		return m, nil
	}
	fn := func(m *cuda.Module, entry, g string) (*cuda.Function, error) {
		return m.Function(codegen.OptimEntry(entry, g, wdt))
	}
	src, err := get(gsrc)
	if err != nil {
		return err
	}
	for _, e := range []struct {
		dst   **cuda.Function
		entry string
	}{{&o.sumsq, codegen.OptimSumSqEntry}, {&o.norm, codegen.OptimNormEntry},
		{&o.adamw, codegen.OptimAdamWEntry}, {&o.cast, codegen.OptimCastEntry}} {
		if *e.dst, err = fn(src, e.entry, gsrc); err != nil {
			return err
		}
	}
	if o.micro > 1 {
		arena, err := src, error(nil)
		if gdt != gsrc {
			if arena, err = get(gdt); err != nil {
				return err
			}
		}
		if o.accum, err = fn(arena, codegen.OptimAccumEntry, gdt); err != nil {
			return err
		}
	}
	return nil
}

// Elements is the number of trained weight elements (the length of every
// flat state buffer).
func (o *Optimizer) Elements() int64 { return o.total }

func (o *Optimizer) grid() [3]uint32 { return [3]uint32{uint32(o.nChunks), 1, 1} }

var optimBlock = [3]uint32{codegen.OptimBlock, 1, 1}

// loadChunk is the most elements Load converts at once: the state goes up
// through one buffer of this many fp32s, not as an fp32 copy of each whole
// part beside the host tensors it comes from (issue #26: three such copies, 12
// bytes a parameter of garbage, carried the host past its plan).
const loadChunk = 1 << 20

// Load uploads master weights and moments (fp32 values, one tensor per trained
// weight in spec order) and rounds the masters into the working weights. A nil
// tensor is zeros (a fresh moment, which the trainer holds no host copy of).
func (o *Optimizer) Load(master, m, v []*tensor.Tensor) error {
	buf := make([]float32, min(loadChunk, o.total))
	for _, st := range []struct {
		p  cuda.DevicePtr
		ts []*tensor.Tensor
	}{{o.master, master}, {o.m, m}, {o.v, v}} {
		if len(st.ts) != len(o.sizes) {
			return fmt.Errorf("exec: optimizer load: %d tensors for %d weights", len(st.ts), len(o.sizes))
		}
		for i, t := range st.ts {
			if t != nil && int64(t.Numel()) != o.sizes[i] {
				return fmt.Errorf("exec: optimizer load: tensor %d has %d elements, want %d", i, t.Numel(), o.sizes[i])
			}
		}
		// off counts the elements uploaded, n those waiting in buf; a copy from
		// pageable memory has read buf when it returns, so buf is reused.
		var off, n int64
		flush := func() error {
			if err := cuda.CopyHtoD(o.dev, st.p+cuda.DevicePtr(4*off), buf[:n]); err != nil {
				return fmt.Errorf("exec: optimizer load: %w", err)
			}
			off, n = off+n, 0
			return nil
		}
		for i, t := range st.ts {
			if t == nil { // zeros: a fresh moment has no host tensor
				for range o.sizes[i] {
					buf[n] = 0
					if n++; n == int64(len(buf)) {
						if err := flush(); err != nil {
							return err
						}
					}
				}
				continue
			}
			for _, x := range t.F {
				buf[n] = float32(x)
				if n++; n == int64(len(buf)) {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return o.launch(o.cast, o.wptr, o.base, o.ck, o.cs, o.cl, o.master)
}

// launch runs fn over the chunk table on the session's stream.
func (o *Optimizer) launch(fn *cuda.Function, args ...any) error {
	if o.nChunks == 0 {
		return nil
	}
	return fn.Launch(o.grid(), optimBlock, 0, o.b.s.stream, args...)
}

// Accumulate adds the gradients of the micro-step just run to the sums (first:
// sets them). Only for Micro > 1.
func (o *Optimizer) Accumulate(first bool) error {
	if o.accum == nil {
		return errors.New("exec: Accumulate on an optimizer of one micro-step")
	}
	f := int32(0)
	if first {
		f = 1
	}
	s := o.b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prof == nil {
		return o.launch(o.accum, o.gptr, o.base, o.ck, o.cs, o.cl, o.sum, f)
	}
	err := s.prof.mark(0, s.stream)
	if err == nil {
		err = o.launch(o.accum, o.gptr, o.base, o.ck, o.cs, o.cl, o.sum, f)
	}
	if err == nil {
		err = s.prof.mark(1, s.stream)
	}
	if err == nil {
		err = s.stream.Synchronize()
	}
	if err == nil {
		err = s.prof.collect([]span{o.accumSpan(first)})
	}
	return err
}

// Step runs the norm, the clipping and the AdamW update on the gradients of the
// last Bound.Step (or the sums) and returns the gradient norm before clipping:
// eight bytes down, nothing up.
func (o *Optimizer) Step(h AdamWStep) (float64, error) {
	unlock, err := o.b.s.lockOpen()
	if err != nil {
		return 0, err
	}
	defer unlock()
	s := o.b.s
	g := o.gptr
	if o.micro > 1 {
		g = o.sptr
	}
	if s.opts.Poison {
		// What the kernels compute is written before it is read, or NaN shows.
		for i, b := range o.wbufs {
			b.ID = -1
			if err := poisonAt(o.dev, o.wptrs[i], b); err != nil {
				return 0, err
			}
		}
		if err := o.dev.Memset32(o.partial, 0x7ff80000, 2*o.nChunks); err != nil {
			return 0, err
		}
		if err := o.dev.Memset32(o.normCoef, 0x7ff80000, 4); err != nil {
			return 0, err
		}
	}
	// The scalars go up in stream order from pinned memory, ahead of the
	// launches that read them; the previous update has finished (Step
	// synchronises), so its copy no longer reads the pinned bytes.
	err = s.stream.CopyHtoDAsync(o.scalars, o.hostScalars, 0, putScalars(o.hostScalars, h))
	switch {
	case err != nil:
	case o.pending != nil:
		// A snapshot is still copying the state this update overwrites: this
		// step waits for it, so it runs uncaptured.
		err = s.stream.Wait(o.pending)
		o.pending = nil
		if err == nil {
			err = o.queue(g)
		}
	default:
		err = o.replay(g)
	}
	if err == nil {
		err = s.stream.Synchronize()
	}
	if err == nil && s.prof != nil {
		err = s.prof.collect(o.stepSpans())
	}
	if err != nil {
		return 0, fmt.Errorf("exec: optimizer step: %w", err)
	}
	var raw [8]byte
	if err := cuda.CopyDtoH(o.dev, raw[:], o.normCoef); err != nil {
		return 0, fmt.Errorf("exec: optimizer step: downloading the norm: %w", err)
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(raw[:])), nil
}

// dtypeSize is the byte size of one element of storage dtype dt (4 if unknown).
func dtypeSize(dt string) int64 {
	t, err := tensor.ParseDType(dt)
	if err != nil {
		return 4
	}
	return int64(t.Size())
}

// The optimizer's passes over its state, per trained element, as the profile
// counts them (the chunk tables and per-chunk partial sums are left out: a few
// bytes per 64K elements):
//   - accum reads the arena's gradient and writes the fp32 sum, reading it too
//     unless it is the first micro-step;
//   - norm (sumsq, then one block for the norm) reads the gradient once;
//   - adamw reads the gradient, reads and writes the fp32 master, m and v
//     (24 bytes), and writes the working weight: 28 bytes per element with
//     bf16 gradients and weights, the floor of an update that touches each
//     of them once. Clipping needs the global norm before the first update,
//     so the gradient is read twice: 30 bytes per element a step in all.
func (o *Optimizer) accumSpan(first bool) span {
	per := o.asz + 8
	if first {
		per = o.asz + 4
	}
	return span{fam: "optim.accum", kind: "optim", launches: 1, work: codegen.Work{Bytes: o.total * per}}
}

// stepSpans are the norm's two launches and AdamW's one (see accumSpan).
func (o *Optimizer) stepSpans() []span {
	return []span{
		{fam: "optim.norm", kind: "optim", launches: 2, work: codegen.Work{Bytes: o.total * o.gsz}},
		{fam: "optim.adamw", kind: "optim", launches: 1, work: codegen.Work{Bytes: o.total * (o.gsz + 24 + o.wsz)}},
	}
}

// queue issues the update's launches on the session's stream: the norm
// (sumsq, then one block) and AdamW, reading g (the arena's gradients or the
// sums), with profiling marks around the norm and the update.
func (o *Optimizer) queue(g cuda.DevicePtr) error {
	s := o.b.s
	micro := float32(o.micro)
	clip := int32(0)
	if o.maxNorm > 0 {
		clip = 1
	}
	mark := func(k int) error {
		if s.prof == nil {
			return nil
		}
		return s.prof.mark(k, s.stream)
	}
	err := mark(0)
	if err == nil {
		err = o.launch(o.sumsq, g, o.ck, o.cs, o.cl, o.partial, micro)
	}
	if err == nil {
		err = o.norm.Launch([3]uint32{1, 1, 1}, optimBlock, 0, s.stream, o.partial, int32(o.nChunks),
			o.maxNorm, o.normCoef)
	}
	if err == nil {
		err = mark(1)
	}
	if err == nil {
		err = o.launch(o.adamw, g, o.wptr, o.base, o.ck, o.cs, o.cl, o.master, o.m, o.v, o.normCoef,
			micro, clip, o.scalars)
	}
	if err == nil {
		err = mark(2)
	}
	return err
}

// replay runs the update as a CUDA graph where the bound step is captured:
// launched one by one on the first Step, captured on the second, replayed
// after; the step's scalars are in device memory, so the graph is the same
// every step. A capture that fails leaves the update uncaptured, saying why.
func (o *Optimizer) replay(g cuda.DevicePtr) error {
	gs := &o.graphs
	gs.runs++
	if !gs.decided && gs.runs > 1 {
		gs.decided = true
		if why := captureReason(o.b.r.plan, o.b.s.opts); why != "" {
			gs.note = why
		} else if o.nChunks == 0 {
			gs.note = "not captured: nothing to update"
		} else if graph, err := o.b.s.stream.Capture(func() error { return o.queue(g) }); err != nil {
			gs.note = fmt.Sprintf("not captured: capturing the update failed: %v", err)
		} else {
			gs.graph = graph
			gs.note = fmt.Sprintf("captured 3 launches (%d graph nodes)", graph.Nodes())
		}
	}
	if gs.graph == nil {
		return o.queue(g)
	}
	return gs.graph.Launch(o.b.s.stream)
}

// CUDAGraph says how the update runs: "captured 3 launches (N graph nodes)",
// "not captured: why", or "" before its second Step decides.
func (o *Optimizer) CUDAGraph() string {
	o.b.s.mu.Lock()
	defer o.b.s.mu.Unlock()
	return o.graphs.note
}

// Save downloads master weights and moments, one fp32 tensor per trained
// weight in spec order (what a checkpoint holds).
func (o *Optimizer) Save() (master, m, v []*tensor.Tensor, err error) {
	if err := o.b.s.stream.Synchronize(); err != nil {
		return nil, nil, nil, err
	}
	get := func(p cuda.DevicePtr) ([]*tensor.Tensor, error) {
		raw := make([]byte, 4*o.total)
		if err := cuda.CopyDtoH(o.dev, raw, p); err != nil {
			return nil, fmt.Errorf("exec: optimizer save: %w", err)
		}
		return o.decode(raw)
	}
	if master, err = get(o.master); err == nil {
		if m, err = get(o.m); err == nil {
			v, err = get(o.v)
		}
	}
	return master, m, v, err
}

// decode splits one flat fp32 state buffer into a tensor per trained weight.
func (o *Optimizer) decode(raw []byte) ([]*tensor.Tensor, error) {
	return decodeState(o.sizes, o.shapes, raw)
}

// Close waits for a snapshot's copy, then frees the optimizer's memory and
// unloads its kernels.
func (o *Optimizer) Close() error {
	var errs []error
	if o.snap != nil {
		errs = append(errs, o.snap.Release())
	}
	errs = append(errs, o.graphs.graph.Destroy(), o.hostScalars.Free())
	o.graphs.graph, o.hostScalars = nil, nil
	if o.copy != nil {
		errs = append(errs, o.copy.Synchronize(), o.copy.Destroy(), o.copyStart.Destroy(), o.copyReady.Destroy(),
			o.copyDone.Destroy())
		o.copy = nil
	}
	errs = append(errs, release(o.dev, &o.allocs, &o.mods)...)
	return errors.Join(errs...)
}

// lockOpen takes the session's lock for a call that needs it open: ErrClosed
// (and no lock held) once Close has run.
func (s *Session) lockOpen() (unlock func(), err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	return s.mu.Unlock, nil
}

// allocOwned allocates bytes (at least 16) on dev and records the buffer in
// allocs, which release frees.
func allocOwned(dev *cuda.Device, allocs *[]cuda.DevicePtr, bytes int64) (cuda.DevicePtr, error) {
	p, err := dev.Alloc(int(max(bytes, 16)))
	if err == nil {
		*allocs = append(*allocs, p)
	}
	return p, err
}

// release frees an optimizer's device buffers and unloads its modules, emptying
// both lists so a second Close does nothing; the errors are each one's.
func release(dev *cuda.Device, allocs *[]cuda.DevicePtr, mods *[]*cuda.Module) []error {
	var errs []error
	for _, p := range *allocs {
		errs = append(errs, dev.Free(p))
	}
	for _, m := range *mods {
		errs = append(errs, m.Unload())
	}
	*allocs, *mods = nil, nil
	return errs
}

// poisonAt fills b's bytes at p with NaN in b's dtype.
func poisonAt(dev *cuda.Device, p cuda.DevicePtr, b codegen.Buffer) error {
	var err error
	switch b.DType {
	case "f32":
		err = dev.Memset32(p, 0x7fc00000, int(b.Bytes/4))
	case "bf16":
		err = dev.Memset32(p, 0x7fc07fc0, int(b.Bytes/4))
		if err == nil && b.Bytes%4 != 0 {
			err = dev.Memset8(p+cuda.DevicePtr(b.Bytes-2), 0x7f, 2)
		}
	default:
		err = dev.Memset8(p, 0xff, int(b.Bytes))
	}
	return err
}
