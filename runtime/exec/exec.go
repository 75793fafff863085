// Package exec runs an ir.Func on one GPU with the kernels and launch plan of
// package codegen/cuda (docs/design.md §6): it plans one device arena from the
// buffers' lifetimes, uploads weights, constants and inputs, compiles the kernels
// with NVRTC through the on-disk cache, launches kernels and cuBLASLt GEMMs in
// plan order on one stream (copies of offloaded activations on a second one:
// offload.go), and downloads the outputs. A Session keeps all of that
// but the inputs, the launches and the outputs across runs of the same functions.
//
// Invariants:
//   - Nothing panics on a missing GPU or library, a kernel NVRTC rejects (the
//     error names the kernel, the saved source and NVRTC's log), a failed launch
//     (the error names the plan step, its node and kernel) or a plan that does not
//     fit (the error gives the arena's peak bytes and the device's free bytes,
//     before anything is allocated).
//   - The arena is planned greedily (largest buffer first, lowest offset that
//     overlaps no buffer alive at the same time), as in TensorFlow Lite's
//     arena planner; a reshape shares its operand's memory, and a buffer that is
//     an output, a parameter or a constant lives for the whole run.
//   - Launches are asynchronous: an error raised by a kernel surfaces at the next
//     synchronisation, so Options.SyncEach synchronises after every step to pin it
//     to the step that raised it.
//   - A Session runs the same kernels in the same order on the same arena layout
//     as RunWith, so its outputs are bit-identical; no kernel reads an element
//     that the run has not written (Options.Poison tests that), so what earlier
//     runs left in the arena cannot leak into a result.
package exec

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// Options control a run.
type Options struct {
	// Storage is the device storage of f32 values: tensor.F32 (the default) or
	// tensor.BF16 (math stays fp32).
	Storage tensor.DType
	// CacheDir is the kernel cache directory ("" for cuda.DefaultCacheDir).
	CacheDir string
	// SyncEach synchronises after every step so that an asynchronous kernel
	// error names the step that raised it.
	SyncEach bool
	// Poison fills every computed buffer with NaN before the run, so that an
	// element no kernel writes shows up in tests.
	Poison bool
	// Comm is this rank's device communicator (NCCL, or runtime/comm/devlocal's
	// ranks sharing one GPU), for programs sharded over ranks: collectives run
	// on its stream, and the program is built for its rank.
	Comm comm.Device
	// Profile times every launch with CUDA events, by kernel family
	// (Session.Profile). It adds an event record per launch.
	Profile bool
	// ScalarAttention runs every attention on the CUDA-core kernels instead of
	// the tensor-core tier (codegen.Options.ScalarAttention).
	ScalarAttention bool
}

// arenaAlign is the alignment of every buffer in the arena.
const arenaAlign = codegen.ArenaAlign

// Run executes f on dev with f32 storage and returns its outputs by name, as
// interp.Run does. inputs maps parameter names to tensors; parameters with
// Data use it unless overridden.
func Run(dev *cuda.Device, f *ir.Func, inputs map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	return RunWith(dev, f, inputs, Options{})
}

// RunWith is Run with options. It is a Session used once: everything it builds,
// loads and allocates is released before it returns. Callers that run the same
// functions repeatedly (a training loop) should keep a Session instead.
func RunWith(dev *cuda.Device, f *ir.Func, inputs map[string]*tensor.Tensor, opts Options) (map[string]*tensor.Tensor, error) {
	s := NewSession(dev, opts)
	out, err := s.Run(f, inputs)
	// A failure to release is not the run's: its outputs are already on the host.
	s.Close()
	return out, err
}

// runner is the device state of one function in a Session: its plan, loaded
// kernels and arena, and which parameters and constants the arena already holds.
type runner struct {
	// pending holds the Done event of each collective queued and not yet
	// joined by its wait step.
	pending map[pendingKey]*cuda.Event
	dev     *cuda.Device
	prog    *codegen.Program // what runs: plan is its launch plan
	plan    *codegen.LaunchPlan
	offs    []int64 // arena offset per buffer id (-1: not allocated)
	opts    Options
	arena   cuda.DevicePtr
	mods    []*cuda.Module
	fns     map[string]*cuda.Function
	// stream, copy (for offload's copies; nil without them) and blas belong to
	// the Session, shared by its runners.
	stream *cuda.Stream
	copy   *cuda.Stream
	blas   *cuda.BlasLt
	// host is the pinned block of the offloaded values (nil without them), each
	// at hostOffs[buffer id] (offload.go).
	host     *cuda.HostBuffer
	hostOffs []int64
	// written marks the buffers (memory owners) some step writes; such a
	// parameter or constant is uploaded on every run, never kept resident.
	written []bool
	// resident maps a parameter or constant buffer to the host tensor (parameter
	// Data or a constant's value, by pointer) whose contents the arena holds, so
	// the next run need not upload it again.
	resident map[int]*tensor.Tensor
	// prof is the session's profiler (nil unless Options.Profile), spans its
	// family and work per step (made at the first profiled run).
	prof  *profiler
	spans []span
	// graphs is the CUDA graph a Bound step replays (graph.go).
	graphs graphState
	// nParams, nBody and nOutputs are the function's sizes when it was built: a
	// cheap guard against a Func edited in place between runs.
	nParams, nBody, nOutputs int
}

// close unloads the runner's modules and frees its arena; the Session owns the
// stream and the BlasLt handle.
func (r *runner) close() error {
	var errs []error
	errs = append(errs, r.graphs.graph.Destroy())
	r.graphs.graph = nil
	for _, m := range r.mods {
		errs = append(errs, m.Unload())
	}
	r.mods, r.fns = nil, nil
	if r.arena != 0 {
		errs = append(errs, r.dev.Free(r.arena))
		r.arena = 0
	}
	errs = append(errs, r.host.Free())
	r.host = nil
	return errors.Join(errs...)
}

// built reports whether f still has the sizes r was built for.
func (r *runner) built(f *ir.Func) bool {
	return len(f.Params) == r.nParams && len(f.Body) == r.nBody && len(f.Outputs) == r.nOutputs
}

// ptr is the device address of buffer id.
func (r *runner) ptr(id int) cuda.DevicePtr {
	b := r.plan.Buffers[id]
	if b.Kind == "alias" {
		id = b.AliasOf
	}
	return r.arena + cuda.DevicePtr(r.offs[id])
}

// load fetches every kernel from the cache (compiling it on a miss) and loads it.
// Misses compile in parallel, one NVRTC compile per CPU (NVRTC programs are
// independent and the cache is safe for concurrent use); modules load in order.
// On error the modules loaded so far stay in r.mods for close.
func (r *runner) load(ks []codegen.Kernel, cache *cuda.Cache) error {
	r.fns = map[string]*cuda.Function{}
	imgs := make([][]byte, len(ks))
	errs := make([]error, len(ks))
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, k := range ks {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			arch, err := r.dev.KernelArch(k.Arch)
			if err != nil {
				errs[i] = err // the load loop names the kernel
				return
			}
			imgs[i], errs[i] = cache.Get(k.Source, k.Name+".cu", arch, nil)
		})
	}
	wg.Wait()
	for i, k := range ks {
		img, err := imgs[i], errs[i]
		if err != nil {
			return fmt.Errorf("exec: kernel %s (%s): %w", k.Name, k.Op, err)
		}
		m, err := r.dev.LoadModule(img)
		if err != nil {
			return fmt.Errorf("exec: loading kernel %s: %w", k.Name, err)
		}
		r.mods = append(r.mods, m)
		fn, err := m.Function(k.Entry)
		if err != nil {
			return fmt.Errorf("exec: kernel %s: %w", k.Name, err)
		}
		if k.Shared > 48<<10 {
			if err := fn.SetMaxDynamicSharedMem(int(k.Shared)); err != nil {
				return fmt.Errorf("exec: kernel %s needs %d bytes of dynamic shared memory: %w", k.Name, k.Shared, err)
			}
		}
		r.fns[k.Name] = fn
	}
	return nil
}

// findWrites fills r.written from the kernels' output parameters and the GEMMs'
// C operands. A launch with more arguments than its kernel declares counts every
// argument as written, so a malformed plan errs towards uploading again.
func (r *runner) findWrites(ks []codegen.Kernel) {
	params := map[string][]codegen.Param{}
	for _, k := range ks {
		params[k.Name] = k.Params
	}
	r.written = make([]bool, len(r.plan.Buffers))
	mark := func(id int) {
		if id < 0 || id >= len(r.plan.Buffers) {
			return
		}
		if b := r.plan.Buffers[id]; b.Kind == "alias" {
			id = b.AliasOf
		}
		r.written[id] = true
	}
	for _, s := range r.plan.Steps {
		switch s.Kind {
		case "kernel":
			ps := params[s.Kernel]
			for j, a := range s.Args {
				if j >= len(ps) || ps[j].Out {
					mark(a)
				}
			}
		case "gemm":
			if len(s.Args) > 2 {
				mark(s.Args[2])
			}
		case "collective", "h2d":
			if len(s.Args) > 1 {
				mark(s.Args[1])
			}
		case "wait", "d2h": // a d2h copy writes host memory
		default:
			for _, a := range s.Args {
				mark(a)
			}
		}
	}
}

// run uploads, launches and downloads one run. On error it forgets which
// buffers are resident, so the next run uploads every parameter and constant.
func (r *runner) run(f *ir.Func, host map[int]binding) (map[string]*tensor.Tensor, error) {
	err := r.upload(host, false)
	if err == nil {
		err = r.launch(f)
	}
	var out map[string]*tensor.Tensor
	if err == nil {
		out, err = r.download(f)
	}
	if err != nil {
		clear(r.resident)
		return nil, err
	}
	return out, nil
}

// binding is the host tensor of a parameter or constant buffer. input marks a
// tensor passed in the run's inputs: it is uploaded on every run, since the caller
// may pass new values in the same tensor.
type binding struct {
	t     *tensor.Tensor
	input bool
}

// bindParams resolves every parameter to a host tensor, as the CPU interpreter
// does: missing, unknown and mistyped inputs are one error listing them all.
func bindParams(f *ir.Func, plan *codegen.LaunchPlan, inputs map[string]*tensor.Tensor) (map[int]binding, error) {
	ts, given, err := f.Bind(inputs, nil)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	host := map[int]binding{}
	for i, t := range ts {
		host[i] = binding{t, given[i]} // parameters are numbered first, in order
	}
	for id, t := range plan.Constants {
		host[id] = binding{t, false}
	}
	return host, nil
}

// upload copies parameters and constants in their storage dtype and poisons the
// rest when asked. A parameter's Data or a constant that the arena already holds
// from an earlier run, and that no step overwrites, is not copied again. With
// keepParams (a Bound step), parameters not in host hold their resident values
// and are neither uploaded nor poisoned.
//
// Poisoning and uploads run on the legacy default stream, which the session's
// non-blocking streams do not wait for: so work still queued on them (the
// optimizer's update of the previous step) finishes before anything is
// poisoned, and the device is synchronised before the launch that reads what
// was written.
func (r *runner) upload(host map[int]binding, keepParams bool) (err error) {
	issued := false
	defer func() {
		if issued && err == nil {
			if err = r.dev.Synchronize(); err != nil {
				err = fmt.Errorf("exec: after uploading: %w", err)
			}
		}
	}()
	if r.opts.Poison {
		if r.stream != nil {
			if err := r.stream.Synchronize(); err != nil {
				return fmt.Errorf("exec: before poisoning: %w", err)
			}
		}
		r.poisonHost()
	}
	var chunk []byte // copyUp's buffer, shared by every upload here
	for _, b := range r.plan.Buffers {
		if r.offs[b.ID] < 0 || b.Bytes == 0 {
			continue
		}
		h, ok := host[b.ID]
		if !ok {
			if r.opts.Poison && !(keepParams && b.Kind == "param") {
				if err := r.poison(b); err != nil {
					return err
				}
				issued = true
			}
			continue
		}
		keep := !h.input && !r.written[b.ID]
		if keep && r.resident[b.ID] == h.t {
			continue
		}
		delete(r.resident, b.ID)
		dt, err := tensor.ParseDType(b.DType)
		if err != nil {
			return fmt.Errorf("exec: buffer %d: %w", b.ID, err)
		}
		if err := copyUp(r.dev, r.ptr(b.ID), convert(h.t, dt), &chunk); err != nil {
			return fmt.Errorf("exec: uploading buffer %%%d (%s %q): %w", b.ID, b.Kind, b.Name, err)
		}
		issued = true
		if keep {
			r.resident[b.ID] = h.t
		}
	}
	return nil
}

// poison fills a buffer with NaN in its dtype (0xff bytes for integers).
func (r *runner) poison(b codegen.Buffer) error {
	if err := poisonAt(r.dev, r.ptr(b.ID), b); err != nil {
		return fmt.Errorf("exec: poisoning buffer %%%d: %w", b.ID, err)
	}
	return nil
}

// uploadChunk is the most bytes copyUp encodes at once.
const uploadChunk = 4 << 20

// copyUp copies t, encoded in its dtype, to device memory at p through *chunk
// (grown to at most uploadChunk bytes and reused): binding a model's weights
// holds one chunk beside their host tensors, not an encoded copy of each one
// until the GC collects it (issue #26). A copy from pageable memory has read
// the chunk when it returns.
func copyUp(d *cuda.Device, p cuda.DevicePtr, t *tensor.Tensor, chunk *[]byte) error {
	size := int64(t.DType.Size())
	total := int64(t.Numel()) * size
	if want := min(total, uploadChunk); int64(len(*chunk)) < want {
		*chunk = make([]byte, want)
	}
	for off := int64(0); off < total; {
		c := (*chunk)[:min(total-off, int64(len(*chunk)))]
		t.EncodeAt(c, off/size)
		if err := cuda.CopyHtoD(d, p+cuda.DevicePtr(off), c); err != nil {
			return err
		}
		off += int64(len(c))
	}
	return nil
}

// convert views t in dtype dt (f32 ↔ bf16 storage); Encode rounds.
func convert(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	if t.DType == dt {
		return t
	}
	return &tensor.Tensor{DType: dt, Shape: t.Shape, F: t.F, I: t.I}
}

// launch runs the plan's steps in order on the stream and waits for them.
func (r *runner) launch(f *ir.Func) error {
	if err := r.queue(f); err != nil {
		return err
	}
	if err := r.stream.Synchronize(); err != nil {
		return fmt.Errorf("exec: running the plan (set Options.SyncEach to find the step): %w", err)
	}
	if r.prof != nil {
		if r.spans == nil {
			r.spans = planSpans(r.plan)
		}
		return r.prof.collect(r.spans)
	}
	return nil
}

// queue issues the plan's steps in order on the stream without waiting (unless
// Options.SyncEach).
func (r *runner) queue(f *ir.Func) error {
	defer r.dropPending()
	for i, s := range r.plan.Steps {
		where := func() string {
			w := fmt.Sprintf("step %d of %d (node %d", i, len(r.plan.Steps), s.Node)
			if s.Node >= 0 && s.Node < len(f.Body) {
				w += ", " + f.Body[s.Node].Where()
			}
			if s.Kernel != "" {
				w += ", kernel " + s.Kernel
			}
			return w + ")"
		}
		var err error
		if r.prof != nil {
			if err := r.prof.mark(i, r.stream); err != nil {
				return err
			}
		}
		switch s.Kind {
		case "kernel":
			args := make([]any, len(s.Args))
			for j, a := range s.Args {
				p := r.ptr(a)
				if j < len(s.Offs) && s.Offs[j] != 0 {
					p += cuda.DevicePtr(s.Offs[j] * r.elemSize(a))
				}
				args[j] = p
			}
			fn := r.fns[s.Kernel]
			if fn == nil {
				err = fmt.Errorf("lcc: BUG: kernel %q is not in the program", s.Kernel)
				break
			}
			err = fn.Launch(s.Grid, s.Block, s.Shared, r.stream, args...)
		case "gemm":
			err = r.gemm(s)
		case "collective":
			err = r.collective(f, s)
		case "d2h", "h2d":
			err = r.copyStep(s)
		case "wait":
			err = r.wait(s)
		default:
			err = fmt.Errorf("unknown step kind %q", s.Kind)
		}
		if err == nil && r.opts.SyncEach {
			err = r.stream.Synchronize()
		}
		if err != nil {
			return fmt.Errorf("exec: %s: %w", where(), err)
		}
	}
	if r.prof != nil {
		return r.prof.mark(len(r.plan.Steps), r.stream)
	}
	return nil
}

// elemSize is the byte size of one element of buffer id (1 if its dtype is unknown).
func (r *runner) elemSize(id int) int64 {
	dt, err := tensor.ParseDType(r.plan.Buffers[id].DType)
	if err != nil {
		return 1
	}
	return int64(dt.Size())
}

// gemm issues one cuBLASLt matmul; K = 0 gives zeros (or leaves C when Beta = 1).
func (r *runner) gemm(s codegen.Step) error {
	g := s.Gemm
	if g == nil || len(s.Args) < 3 || r.blas == nil {
		return errors.New("lcc: BUG: gemm step without its operands or a cuBLASLt handle")
	}
	dt, err := tensor.ParseDType(g.DType)
	if err != nil {
		return err
	}
	ct := dt
	if g.CType != "" {
		if ct, err = tensor.ParseDType(g.CType); err != nil {
			return err
		}
	}
	es, cs := int64(dt.Size()), int64(ct.Size())
	a, b, c := r.ptr(s.Args[0]), r.ptr(s.Args[1]), r.ptr(s.Args[2])
	c += cuda.DevicePtr(g.OffC * cs)
	if g.K == 0 {
		if g.Beta == 1 {
			return nil
		}
		if g.Beta != 0 {
			return fmt.Errorf("lcc: BUG: gemm with K = 0 and beta %g", g.Beta)
		}
		return r.stream.Memset8(c, 0, int(g.M*g.N*max(g.Batch, 1)*cs)) // in order with the step's kernels
	}
	var cType tensor.DType
	if ct != dt {
		cType = ct
	}
	return r.blas.Gemm(r.stream, cuda.GemmParams{TransA: g.TransA, TransB: g.TransB,
		M: int(g.M), N: int(g.N), K: int(g.K),
		A: a + cuda.DevicePtr(g.OffA*es), B: b + cuda.DevicePtr(g.OffB*es), C: c,
		Batch: int(g.Batch), StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC,
		Type: dt, CType: cType, Alpha: g.Alpha, Beta: g.Beta})
}

// download copies the outputs back, widening bf16 storage to the IR dtype.
func (r *runner) download(f *ir.Func) (map[string]*tensor.Tensor, error) {
	out := map[string]*tensor.Tensor{}
	for _, o := range r.plan.Outputs {
		b := r.plan.Buffers[o.ID]
		dt, err := tensor.ParseDType(b.DType)
		if err != nil {
			return nil, err
		}
		raw := make([]byte, b.Bytes)
		if b.Bytes > 0 {
			if err := cuda.CopyDtoH(r.dev, raw, r.ptr(o.ID)); err != nil {
				return nil, fmt.Errorf("exec: downloading output %q: %w", o.Name, err)
			}
		}
		t, err := tensor.Decode(dt, b.Shape, raw)
		if err != nil {
			return nil, fmt.Errorf("exec: output %q: %w", o.Name, err)
		}
		if want := f.Output(o.Name).Type.DType; want != dt {
			t = &tensor.Tensor{DType: want, Shape: t.Shape, F: t.F, I: t.I}
		}
		out[o.Name] = t
	}
	return out, nil
}

// PlanArena is codegen's arena layout (cuda.PlanArena), the one the executor
// allocates and the program hash covers.
func PlanArena(plan *codegen.LaunchPlan) (offs []int64, peak int64) { return codegen.PlanArena(plan) }
