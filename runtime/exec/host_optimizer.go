package exec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// HostOptimizer is AdamW's state of a Bound training step in pinned host
// memory, the idea of ZeRO-Offload (Ren et al., "ZeRO-Offload: Democratizing
// Billion-Scale Model Training", USENIX ATC 2021) on one GPU: the fp32 masters
// and both moments never reach the device, which holds only the step's arena
// (working weights and gradients in their storage dtype) and the norm's few
// bytes of scratch.
//
// A Step runs in three overlapped parts:
//   - on the GPU, the norm and the clipping coefficient with the resident
//     optimizer's own kernels (sumsq, then the fixed fp64 tree), so that the
//     coefficient is bit for bit the resident path's;
//   - on a copy stream, the gradients leave the GPU tensor by tensor into
//     pinned staging, an event after each;
//   - on the CPU, Threads goroutines run the AdamW update (HostUpdate,
//     train/optim's arithmetic) over chunks as their tensor's gradient lands,
//     and round the new masters into the working weights' pinned staging;
//     each tensor's goes back to the arena on the session's stream once its
//     last chunk is done, ahead of the next step's forward.
//
// The state's layout is the resident Optimizer's (flat fp32 masters, m, v in
// spec order): Load, Save and Snapshot speak the same tensors and bytes, so a
// checkpoint of either resumes on either, bit for bit.
//
// Invariants: the pinned state is written only by Step's goroutines and Load,
// both done before they return; the gradient staging is written only by the
// copy stream, between a Step's start and its events; the weight staging is
// read by the uploads that a Step queues, which finish (stream order) before
// the next Bound.Step returns, so the next Step may write it again.
type HostOptimizer struct {
	b       *Bound
	dev     *cuda.Device
	tb      trained
	nChunks int
	maxNorm float64
	threads int
	update  HostUpdate

	// On the device: the norm's per-chunk partial sums, its result (norm,
	// coefficient) and the chunk tables the norm kernels read.
	partial, normCoef, gptr, ck, cs, cl cuda.DevicePtr
	allocs                              []cuda.DevicePtr
	mods                                []*cuda.Module
	sumsq, norm                         *cuda.Function

	// In pinned host memory: the state, the gradients' and working weights'
	// staging (storage dtype, flat, spec order) and the norm's 16 bytes.
	master, m, v, grads, weights, coef *cuda.HostBuffer
	// copy is the stream of the gradients' copies; start marks the session's
	// stream when a Step begins, landed[k] the copy stream after tensor k's
	// gradient, normDone the session's stream after the norm's download.
	copy            *cuda.Stream
	start, normDone *cuda.Event
	landed          []*cuda.Event
	// last is the split of the last Step (LastSplit).
	last HostSplit
	// st is the update on the GPU (HostOptimizerSpec.OnDevice; host_stream.go),
	// nil for the CPU's.
	st *hostStream
}

// HostUpdate is the CPU update of one chunk: train/optim's StepScalars.Apply
// with h's scalars (exec does not import train; the trainer passes it).
type HostUpdate func(h AdamWStep, g, master, m, v []float32, coef float32, clip bool)

// HostOptimizerSpec says what a HostOptimizer trains, and how.
type HostOptimizerSpec struct {
	OptimizerSpec
	// Update is the chunk update (required unless OnDevice).
	Update HostUpdate
	// OnDevice runs the update on the GPU instead, the state streaming up and
	// back down through two device windows (host_stream.go); the CPU holds no
	// gradient or weight staging then.
	OnDevice bool
	// Window is the most elements of one window of the update on the GPU (0:
	// cost.HostStreamWindow); tests make it small, to stream through many.
	Window int64
	// Threads is the number of update goroutines (0: GOMAXPROCS).
	Threads int
}

// HostSplit is where a HostOptimizer's Step spent its time: Norm from the
// start to the norm on the host (the GPU's norm kernels and a 16-byte copy),
// Update from then until the last chunk is updated (the gradients' copies
// down and the updated weights' copies up overlap it; CopyWait is the part of
// it a goroutine spent waiting for a gradient, on average), and Queue from
// then until the last upload is queued.
type HostSplit struct {
	Norm, Update, CopyWait, Queue time.Duration
}

// String is the split in milliseconds, as the train report prints it.
func (s HostSplit) String() string {
	return fmt.Sprintf("norm %.2f ms, update %.2f ms (%.2f ms of it waiting for gradients), upload queued "+
		"in %.2f ms", ms(s.Norm), ms(s.Update), ms(s.CopyWait), ms(s.Queue))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// NewHostOptimizer allocates AdamW's state for spec in pinned host memory and
// loads the norm's kernels. It refuses gradient accumulation (Micro > 1): the
// sums would need a host pass per micro-step. The state is undefined until
// Load.
func (b *Bound) NewHostOptimizer(spec HostOptimizerSpec) (*HostOptimizer, error) {
	if spec.Micro > 1 {
		return nil, fmt.Errorf("exec: the host optimizer does not accumulate gradients (%d micro-steps): "+
			"keep the optimizer state on the device, or use one micro-step", spec.Micro)
	}
	if spec.Update == nil && !spec.OnDevice {
		return nil, errors.New("exec: host optimizer without an update function")
	}
	tb, err := b.trainedBuffers(spec.OptimizerSpec)
	if err != nil {
		return nil, err
	}
	for _, dt := range []string{tb.gdt, tb.wdt} {
		if dt != "f32" && dt != "bf16" {
			return nil, fmt.Errorf("exec: host optimizer: storage %s, want f32 or bf16", dt)
		}
	}
	threads := spec.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	o := &HostOptimizer{b: b, dev: b.s.dev, tb: tb, maxNorm: spec.MaxNorm, threads: threads, update: spec.Update}
	if err := o.setup(spec.OnDevice, spec.Window); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// setup loads the kernels and allocates the device tables and pinned buffers;
// onDevice also the streamed update's (setupStream).
func (o *HostOptimizer) setup(onDevice bool, window int64) error {
	k, err := codegen.OptimKernel(o.tb.gdt, o.tb.wdt)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	img, err := o.b.s.cache.Get(k.Source, k.Name+".cu", o.dev.Arch(), nil)
	if err != nil {
		return fmt.Errorf("exec: kernel %s: %w", k.Name, err)
	}
	mod, err := o.dev.LoadModule(img)
	if err != nil {
		return fmt.Errorf("exec: loading kernel %s: %w", k.Name, err)
	}
	o.mods = append(o.mods, mod)
	if o.sumsq, err = mod.Function(codegen.OptimEntry(codegen.OptimSumSqEntry, o.tb.gdt, o.tb.wdt)); err != nil {
		return err
	}
	if o.norm, err = mod.Function(codegen.OptimEntry(codegen.OptimNormEntry, o.tb.gdt, o.tb.wdt)); err != nil {
		return err
	}
	ck, cs, cl := codegen.OptimChunks(o.tb.sizes)
	o.nChunks = len(ck)
	alloc := func(bytes int64) (cuda.DevicePtr, error) { return allocOwned(o.dev, &o.allocs, bytes) }
	if o.partial, err = alloc(8 * int64(o.nChunks)); err == nil {
		o.normCoef, err = alloc(16)
	}
	if err != nil {
		return fmt.Errorf("exec: host optimizer scratch: %w", err)
	}
	if err := uploadTables(o.dev, &o.allocs, []table{{&o.gptr, o.tb.gptrs}, {&o.ck, ck}, {&o.cs, cs},
		{&o.cl, cl}}); err != nil {
		return fmt.Errorf("exec: host optimizer tables: %w", err)
	}
	n := int(o.tb.total)
	pinned := []struct {
		dst   **cuda.HostBuffer
		bytes int
	}{{&o.master, 4 * n}, {&o.m, 4 * n}, {&o.v, 4 * n}, {&o.coef, 16}}
	if !onDevice { // the CPU update's staging of the gradients and the weights
		pinned = append(pinned, []struct {
			dst   **cuda.HostBuffer
			bytes int
		}{{&o.grads, n * int(dtypeSize(o.tb.gdt))}, {&o.weights, n * int(dtypeSize(o.tb.wdt))}}...)
	}
	for _, h := range pinned {
		if *h.dst, err = o.dev.AllocHost(max(h.bytes, 16)); err != nil {
			return fmt.Errorf("exec: host optimizer state: %w", err)
		}
	}
	if onDevice {
		if window <= 0 {
			window = cost.HostStreamWindow
		}
		if err := o.setupStream(mod, cl, window); err != nil {
			return err
		}
	}
	if o.copy, err = o.dev.NewStream(); err != nil {
		return err
	}
	if o.start, err = o.dev.NewEvent(); err == nil {
		o.normDone, err = o.dev.NewEvent()
	}
	for range o.tb.sizes {
		var e *cuda.Event
		if err == nil {
			e, err = o.dev.NewEvent()
			o.landed = append(o.landed, e)
		}
	}
	return err
}

// Elements is the number of trained weight elements.
func (o *HostOptimizer) Elements() int64 { return o.tb.total }

// Threads is the number of goroutines of the CPU update.
func (o *HostOptimizer) Threads() int { return o.threads }

// LastSplit is where the last Step spent its time.
func (o *HostOptimizer) LastSplit() HostSplit { return o.last }

// f32s views a pinned buffer of fp32 values.
func f32s(h *cuda.HostBuffer, n int64) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&h.Bytes()[0])), n)
}

// Load writes master weights and moments (fp32 values, one tensor per trained
// weight in spec order) into pinned memory and rounds the masters into the
// working weights, uploaded before Load returns. A nil tensor is zeros, as in
// Optimizer.Load.
func (o *HostOptimizer) Load(master, m, v []*tensor.Tensor) error {
	for _, st := range []struct {
		h  *cuda.HostBuffer
		ts []*tensor.Tensor
	}{{o.master, master}, {o.m, m}, {o.v, v}} {
		if len(st.ts) != len(o.tb.sizes) {
			return fmt.Errorf("exec: optimizer load: %d tensors for %d weights", len(st.ts), len(o.tb.sizes))
		}
		dst := f32s(st.h, o.tb.total)
		var off int64
		for i, t := range st.ts {
			if t == nil { // zeros: a fresh moment has no host tensor
				clear(dst[off : off+o.tb.sizes[i]])
				off += o.tb.sizes[i]
				continue
			}
			if int64(t.Numel()) != o.tb.sizes[i] {
				return fmt.Errorf("exec: optimizer load: tensor %d has %d elements, want %d", i, t.Numel(),
					o.tb.sizes[i])
			}
			for j, x := range t.F {
				dst[off+int64(j)] = float32(x)
			}
			off += o.tb.sizes[i]
		}
	}
	s := o.b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.st != nil {
		if err := o.castOnDevice(); err != nil {
			return fmt.Errorf("exec: optimizer load: %w", err)
		}
		return nil
	}
	w := o.weights.Bytes()
	p := f32s(o.master, o.tb.total)
	roundInto(o.tb.wdt, w, p, 0)
	err := o.upload()
	if err == nil {
		err = s.stream.Synchronize()
	}
	if err != nil {
		return fmt.Errorf("exec: optimizer load: %w", err)
	}
	return nil
}

// roundInto writes p, fp32 masters from element off on, into w (flat working
// weights of storage dt) rounded as the device's cast (lcc_set) rounds:
// to nearest even for bf16, NaN kept quiet (tensor.Float32ToBF16).
func roundInto(dt string, w []byte, p []float32, off int64) {
	switch dt {
	case "f32":
		for j, x := range p {
			binary.LittleEndian.PutUint32(w[4*(off+int64(j)):], math.Float32bits(x))
		}
	case "bf16":
		for j, x := range p {
			binary.LittleEndian.PutUint16(w[2*(off+int64(j)):], tensor.Float32ToBF16(x))
		}
	default:
		panic("lcc: BUG: host optimizer weights of storage " + dt)
	}
}

// upload queues the copies of the weight staging into the arena's weights on
// the session's stream (its lock held).
func (o *HostOptimizer) upload() error {
	for k := range o.tb.sizes {
		if err := o.uploadOne(k); err != nil {
			return err
		}
	}
	return nil
}

// uploadOne queues the copy of tensor k's working weight from the staging.
func (o *HostOptimizer) uploadOne(k int) error {
	sz := int(dtypeSize(o.tb.wdt))
	var off int
	for _, n := range o.tb.sizes[:k] {
		off += int(n) * sz
	}
	if n := int(o.tb.sizes[k]); n > 0 {
		return o.b.s.stream.CopyHtoDAsync(o.tb.wptrs[k], o.weights, off, n*sz)
	}
	return nil
}

// Accumulate refuses: a HostOptimizer runs one micro-step a step.
func (o *HostOptimizer) Accumulate(bool) error {
	return errors.New("exec: Accumulate on a host optimizer (it trains one micro-step a step)")
}

// Step runs the norm and the clipping on the GPU, then the AdamW update on the
// CPU as the gradients arrive, and queues the new working weights' upload; it
// returns the gradient norm before clipping. The next Bound.Step runs after
// the upload (stream order).
func (o *HostOptimizer) Step(h AdamWStep) (float64, error) {
	if o.st != nil {
		return o.stepOnDevice(h)
	}
	unlock, err := o.b.s.lockOpen()
	if err != nil {
		return 0, err
	}
	defer unlock()
	t0 := time.Now()
	norm, coef, err := o.queue()
	if err != nil {
		return 0, fmt.Errorf("exec: host optimizer step: %w", err)
	}
	t1 := time.Now()
	// The goroutines wait for their tensor's gradient; this goroutine waits
	// for the copies in order and releases each tensor once it has landed.
	ready := make([]chan struct{}, len(o.tb.sizes))
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	waitErr := make(chan error, 1)
	go func() {
		for i, e := range o.landed {
			if err := e.Synchronize(); err != nil {
				waitErr <- err
				for _, c := range ready[i:] {
					close(c)
				}
				return
			}
			close(ready[i])
		}
		waitErr <- nil
	}()
	// Each tensor's working weight goes up as soon as its last chunk is
	// updated, queued by one goroutine, so the copies overlap the update of
	// the tensors after it.
	done := make(chan int, len(o.tb.sizes))
	upErr := make(chan error, 1)
	go func() {
		var err error
		for k := range done {
			if err == nil {
				err = o.uploadOne(k)
			}
		}
		upErr <- err
	}()
	job := HostStep{Sizes: o.tb.sizes, GradDType: o.tb.gdt, WeightDType: o.tb.wdt, Grads: o.grads.Bytes(),
		Master: f32s(o.master, o.tb.total), M: f32s(o.m, o.tb.total), V: f32s(o.v, o.tb.total),
		Weights: o.weights.Bytes(), Scalars: h, Coef: float32(coef), Clip: o.maxNorm > 0, Update: o.update,
		Threads: o.threads, Ready: func(k int) { <-ready[k] }, Done: func(k int) { done <- k }}
	job.Run()
	t2 := time.Now()
	close(done)
	err = <-upErr
	if werr := <-waitErr; werr != nil {
		// The copies failed: the state was updated from whatever had landed, so
		// the run cannot go on; the error says so.
		return 0, fmt.Errorf("exec: host optimizer step: copying the gradients: %w", werr)
	}
	if err != nil {
		return 0, fmt.Errorf("exec: host optimizer step: uploading the weights: %w", err)
	}
	o.last = HostSplit{Norm: t1.Sub(t0), Update: t2.Sub(t1), CopyWait: job.Waited(), Queue: time.Since(t2)}
	return norm, nil
}

// queue issues the norm on the session's stream and the gradients' copies on
// the copy stream, then waits for the norm; it returns the norm and the
// clipping coefficient (the session's lock is held).
func (o *HostOptimizer) queue() (norm, coef float64, err error) {
	s := o.b.s
	if o.nChunks == 0 {
		return 0, 1, nil
	}
	// The copies read what the backward wrote: after start, on the session's
	// stream; the norm runs beside them.
	if err = o.start.Record(s.stream); err == nil {
		err = o.copy.Wait(o.start)
	}
	gsz := int(dtypeSize(o.tb.gdt))
	var off int
	for i, n := range o.tb.sizes {
		if err == nil && n > 0 {
			err = o.copy.CopyDtoHAsync(o.grads, off, cuda.DevicePtr(o.tb.gptrs[i]), int(n)*gsz)
		}
		if err == nil {
			err = o.landed[i].Record(o.copy)
		}
		off += int(n) * gsz
	}
	if err == nil {
		err = o.launchNorm()
	}
	if err == nil {
		err = s.stream.CopyDtoHAsync(o.coef, 0, o.normCoef, 16)
	}
	if err == nil {
		err = o.normDone.Record(s.stream)
	}
	if err == nil {
		err = o.normDone.Synchronize()
	}
	if err != nil {
		// Whatever was queued finishes before the pinned buffers are reused.
		o.copy.Synchronize()
		return 0, 0, err
	}
	raw := o.coef.Bytes()
	return math.Float64frombits(binary.LittleEndian.Uint64(raw)),
		math.Float64frombits(binary.LittleEndian.Uint64(raw[8:])), nil
}

// HostStep is the CPU part of a HostOptimizer's Step over flat host state,
// exported so that its arithmetic is tested against train/optim's update
// function without a GPU: every element of tensors of Sizes (in order) gets
// Update with Scalars, reading its gradient from Grads (GradDType storage),
// its state from Master, M and V (updated in place), and writing the rounded
// master to Weights (WeightDType storage). The work is cut into chunks of
// HostChunk elements (never across tensors) that Threads goroutines take in
// order; Ready, if set, blocks until tensor k's gradient is in Grads, and
// Done, if set, is called once per tensor of at least one element, when its
// last chunk is written (from the goroutine that wrote it).
type HostStep struct {
	Sizes                  []int64
	GradDType, WeightDType string
	Grads, Weights         []byte
	Master, M, V           []float32
	Scalars                AdamWStep
	Coef                   float32
	Clip                   bool
	Update                 HostUpdate
	Threads                int
	Ready, Done            func(k int)
	// waited sums the goroutines' time in Ready, in nanoseconds; workers is
	// their number.
	waited  atomic.Int64
	workers int
}

// HostChunk is the elements of one chunk of the CPU update: 256 KiB of fp32
// gradient scratch, the state's 768 KiB streamed through once.
const HostChunk = 64 << 10

// Run updates every element; it returns when all goroutines are done.
func (j *HostStep) Run() {
	type chunk struct {
		k        int
		off, len int64
	}
	var chunks []chunk
	var off int64
	for k, n := range j.Sizes {
		for s := int64(0); s < n; s += HostChunk {
			chunks = append(chunks, chunk{k, off + s, min(HostChunk, n-s)})
		}
		off += n
	}
	// left counts each tensor's chunks not written yet.
	left := make([]atomic.Int64, len(j.Sizes))
	for _, c := range chunks {
		left[c.k].Add(1)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	j.workers = max(min(j.Threads, len(chunks)), 1)
	for range j.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := make([]float32, HostChunk)
			for {
				c := next.Add(1) - 1
				if c >= int64(len(chunks)) {
					return
				}
				ch := chunks[c]
				if j.Ready != nil {
					t := time.Now()
					j.Ready(ch.k)
					j.waited.Add(int64(time.Since(t)))
				}
				gr := g[:ch.len]
				decodeInto(j.GradDType, gr, j.Grads, ch.off)
				lo, hi := ch.off, ch.off+ch.len
				j.Update(j.Scalars, gr, j.Master[lo:hi], j.M[lo:hi], j.V[lo:hi], j.Coef, j.Clip)
				roundInto(j.WeightDType, j.Weights, j.Master[lo:hi], lo)
				if left[ch.k].Add(-1) == 0 && j.Done != nil {
					j.Done(ch.k)
				}
			}
		}()
	}
	wg.Wait()
}

// Waited is the mean time a goroutine of the last Run spent in Ready.
func (j *HostStep) Waited() time.Duration {
	return time.Duration(j.waited.Load() / int64(max(j.workers, 1)))
}

// decodeInto reads len(g) gradients of storage dt from raw, from element off
// on, into fp32 (exact: bf16 widens, f32 is itself).
func decodeInto(dt string, g []float32, raw []byte, off int64) {
	switch dt {
	case "f32":
		for j := range g {
			g[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(off+int64(j)):]))
		}
	case "bf16":
		for j := range g {
			g[j] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*(off+int64(j)):])) << 16)
		}
	default:
		panic("lcc: BUG: host optimizer gradients of storage " + dt)
	}
}

// CUDAGraph says how the update runs, for the train report's graph line.
func (o *HostOptimizer) CUDAGraph() string {
	if o.st != nil {
		return fmt.Sprintf("on the GPU, the host's state streamed through %d windows of up to %d elements",
			len(o.st.windows), cost.HostStreamWindow)
	}
	return fmt.Sprintf("on the host (CPU AdamW, %d threads)", o.threads)
}

// OnDevice says whether the update runs on the GPU (HostOptimizerSpec.OnDevice).
func (o *HostOptimizer) OnDevice() bool { return o.st != nil }

// Save returns master weights and moments, one fp32 tensor per trained weight
// in spec order (what a checkpoint holds), as the resident Optimizer's Save.
func (o *HostOptimizer) Save() (master, m, v []*tensor.Tensor, err error) {
	if err := o.b.s.stream.Synchronize(); err != nil {
		return nil, nil, nil, err
	}
	get := func(h *cuda.HostBuffer) ([]*tensor.Tensor, error) {
		return decodeState(o.tb.sizes, o.tb.shapes, h.Bytes()[:4*o.tb.total])
	}
	if master, err = get(o.master); err == nil {
		if m, err = get(o.m); err == nil {
			v, err = get(o.v)
		}
	}
	return master, m, v, err
}

// decodeState splits one flat fp32 state buffer into a tensor per trained
// weight.
func decodeState(sizes []int64, shapes [][]int64, raw []byte) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(sizes))
	var off int64
	for i, n := range sizes {
		t, err := tensor.Decode(tensor.F32, shapes[i], raw[4*off:4*(off+n)])
		if err != nil {
			return nil, err
		}
		out[i] = t
		off += n
	}
	return out, nil
}

// SnapshotBytes is the size of the pinned buffer a Snapshot fills, as the
// resident Optimizer's: masters, first and second moments, fp32, flat.
func (o *HostOptimizer) SnapshotBytes() int { return int(12 * o.tb.total) }

// Snapshot copies the state into host (at least SnapshotBytes long) with the
// CPU, in parallel, and returns a Snapshot whose copy is done: the state is
// in host memory already and the next Step overwrites it. stage is ignored.
func (o *HostOptimizer) Snapshot(host *cuda.HostBuffer, _ bool) (*Snapshot, error) {
	if host == nil || host.Len() < o.SnapshotBytes() {
		return nil, fmt.Errorf("exec: optimizer snapshot: want a pinned buffer of %d bytes", o.SnapshotBytes())
	}
	t0 := time.Now()
	n := int(4 * o.tb.total)
	dst := host.Bytes()
	var wg sync.WaitGroup
	for i, src := range []*cuda.HostBuffer{o.master, o.m, o.v} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[i*n:(i+1)*n], src.Bytes()[:n])
		}()
	}
	wg.Wait()
	queued := make(chan struct{})
	close(queued)
	return &Snapshot{host: host, sizes: o.tb.sizes, total: o.tb.total, queued: queued,
		hostCopy: time.Since(t0)}, nil
}

// Close waits for the copies in flight, then frees the optimizer's memory and
// unloads its kernels.
func (o *HostOptimizer) Close() error {
	errs := []error{o.closeStream()}
	if o.copy != nil {
		errs = append(errs, o.copy.Synchronize(), o.copy.Destroy())
		o.copy = nil
	}
	// The weights' uploads read the staging: they finish before it is freed
	// (a closed session synchronised its stream already).
	s := o.b.s
	s.mu.Lock()
	if !s.closed && s.stream != nil {
		errs = append(errs, s.stream.Synchronize())
	}
	s.mu.Unlock()
	for _, e := range append([]*cuda.Event{o.start, o.normDone}, o.landed...) {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	o.start, o.normDone, o.landed = nil, nil, nil
	for _, h := range []**cuda.HostBuffer{&o.master, &o.m, &o.v, &o.grads, &o.weights, &o.coef} {
		errs = append(errs, (*h).Free())
		*h = nil
	}
	errs = append(errs, release(o.dev, &o.allocs, &o.mods)...)
	return errors.Join(errs...)
}
