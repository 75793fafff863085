// Package exec runs an ir.Func on one GPU with the kernels and launch plan of
// package codegen/cuda (DESIGN.md §6): it plans one device arena from the
// buffers' lifetimes, uploads weights, constants and inputs, compiles the kernels
// with NVRTC through the on-disk cache, launches kernels and cuBLASLt GEMMs in
// plan order on one stream, and downloads the outputs.
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
package exec

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
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
}

// arenaAlign is the alignment of every buffer in the arena (cuBLASLt and
// 16-byte vector loads need far less; cudaMalloc gives 256).
const arenaAlign = 256

// Run executes f on dev with f32 storage and returns its outputs by name, as
// runtime/cpu.Run does. inputs maps parameter names to tensors; parameters with
// Data use it unless overridden.
func Run(dev *cuda.Device, f *ir.Func, inputs map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	return RunWith(dev, f, inputs, Options{})
}

// RunWith is Run with options.
func RunWith(dev *cuda.Device, f *ir.Func, inputs map[string]*tensor.Tensor, opts Options) (map[string]*tensor.Tensor, error) {
	if dev == nil {
		return nil, errors.New("exec: no GPU device (open one with runtime/cuda.Open)")
	}
	prog, err := codegen.Build(f, codegen.Options{Arch: dev.Arch(), Storage: opts.Storage})
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	host, err := bindParams(f, prog.Plan, inputs)
	if err != nil {
		return nil, err
	}
	offs, peak := PlanArena(prog.Plan)
	free, err := dev.FreeMem()
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if uint64(peak) > free {
		return nil, fmt.Errorf("exec: func @%s needs an arena of %d bytes (%.2f GiB) at its peak, but %s has %d bytes (%.2f GiB) free",
			f.Name, peak, float64(peak)/(1<<30), dev.Name(), free, float64(free)/(1<<30))
	}
	r := &runner{dev: dev, plan: prog.Plan, offs: offs, opts: opts}
	defer r.close()
	if err := r.load(prog.Kernels, opts.CacheDir); err != nil {
		return nil, err
	}
	if peak > 0 {
		if r.arena, err = dev.Alloc(int(peak)); err != nil {
			return nil, fmt.Errorf("exec: arena of %d bytes: %w", peak, err)
		}
	}
	if err := r.upload(host); err != nil {
		return nil, err
	}
	if err := r.launch(f); err != nil {
		return nil, err
	}
	return r.download(f)
}

// runner holds the device state of one run.
type runner struct {
	dev    *cuda.Device
	plan   *codegen.Plan
	offs   []int64 // arena offset per buffer id (-1: not allocated)
	opts   Options
	arena  cuda.DevicePtr
	stream *cuda.Stream
	blas   *cuda.BlasLt
	mods   []*cuda.Module
	fns    map[string]*cuda.Function
}

func (r *runner) close() {
	if r.blas != nil {
		r.blas.Close()
	}
	if r.stream != nil {
		r.stream.Destroy()
	}
	for _, m := range r.mods {
		m.Unload()
	}
	if r.arena != 0 {
		r.dev.Free(r.arena)
	}
}

// ptr is the device address of buffer id.
func (r *runner) ptr(id int) cuda.DevicePtr {
	b := r.plan.Buffers[id]
	if b.Kind == "alias" {
		id = b.AliasOf
	}
	return r.arena + cuda.DevicePtr(r.offs[id])
}

// load compiles (or fetches from the cache) and loads every kernel.
func (r *runner) load(ks []codegen.Kernel, dir string) error {
	cache, err := cuda.OpenCache(dir)
	if err != nil {
		return fmt.Errorf("exec: kernel cache: %w", err)
	}
	r.fns = map[string]*cuda.Function{}
	for _, k := range ks {
		img, err := cache.Get(k.Source, k.Name+".cu", r.dev.Arch(), nil)
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
		r.fns[k.Name] = fn
	}
	if r.stream, err = r.dev.NewStream(); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	for _, s := range r.plan.Steps {
		if s.Kind == "gemm" {
			if r.blas, err = r.dev.NewBlasLt(); err != nil {
				return fmt.Errorf("exec: %w", err)
			}
			break
		}
	}
	return nil
}

// bindParams resolves every parameter to a host tensor, as the CPU interpreter
// does: missing, unknown and mistyped inputs are one error listing them all.
func bindParams(f *ir.Func, plan *codegen.Plan, inputs map[string]*tensor.Tensor) (map[int]*tensor.Tensor, error) {
	host := map[int]*tensor.Tensor{}
	var missing, unknown, bad []string
	for name := range inputs {
		if f.Param(name) == nil {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	for i, p := range f.Params {
		t := inputs[p.Name]
		if t == nil {
			t = p.Data
		}
		if t == nil {
			missing = append(missing, fmt.Sprintf("%q", p.Name))
			continue
		}
		want := p.Value.Type
		if t.DType != want.DType || !slices.Equal(t.Shape, want.Shape) {
			bad = append(bad, fmt.Sprintf("parameter %q: expected %v%s, got %v%s", p.Name,
				want.DType, tensor.ShapeString(want.Shape), t.DType, tensor.ShapeString(t.Shape)))
			continue
		}
		host[i] = t // parameters are numbered first, in order
	}
	for id, t := range plan.Constants {
		host[id] = t
	}
	sort.Strings(unknown)
	var msgs []string
	if len(missing) > 0 {
		msgs = append(msgs, "missing inputs "+strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		msgs = append(msgs, "unknown inputs "+strings.Join(unknown, ", ")+" (not parameters)")
	}
	msgs = append(msgs, bad...)
	if len(msgs) > 0 {
		return nil, fmt.Errorf("exec: func @%s: %s", f.Name, strings.Join(msgs, "; "))
	}
	return host, nil
}

// upload copies parameters and constants in their storage dtype and poisons the
// rest when asked.
func (r *runner) upload(host map[int]*tensor.Tensor) error {
	for _, b := range r.plan.Buffers {
		if r.offs[b.ID] < 0 || b.Bytes == 0 {
			continue
		}
		t, ok := host[b.ID]
		if !ok {
			if r.opts.Poison {
				if err := r.poison(b); err != nil {
					return err
				}
			}
			continue
		}
		dt, err := tensor.ParseDType(b.DType)
		if err != nil {
			return fmt.Errorf("exec: buffer %d: %w", b.ID, err)
		}
		raw := convert(t, dt).Encode()
		if err := cuda.CopyHtoD(r.dev, r.ptr(b.ID), raw); err != nil {
			return fmt.Errorf("exec: uploading buffer %%%d (%s %q): %w", b.ID, b.Kind, b.Name, err)
		}
	}
	return nil
}

// poison fills a buffer with NaN in its dtype (0xff bytes for integers).
func (r *runner) poison(b codegen.Buffer) error {
	var err error
	switch b.DType {
	case "f32":
		err = r.dev.Memset32(r.ptr(b.ID), 0x7fc00000, int(b.Bytes/4))
	case "bf16":
		err = r.dev.Memset32(r.ptr(b.ID), 0x7fc07fc0, int(b.Bytes/4))
		if err == nil && b.Bytes%4 != 0 {
			err = r.dev.Memset8(r.ptr(b.ID)+cuda.DevicePtr(b.Bytes-2), 0x7f, 2)
		}
	default:
		err = r.dev.Memset8(r.ptr(b.ID), 0xff, int(b.Bytes))
	}
	if err != nil {
		return fmt.Errorf("exec: poisoning buffer %%%d: %w", b.ID, err)
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

// launch runs the plan's steps in order on the stream.
func (r *runner) launch(f *ir.Func) error {
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
		switch s.Kind {
		case "kernel":
			args := make([]any, len(s.Args))
			for j, a := range s.Args {
				args[j] = r.ptr(a)
			}
			err = r.fns[s.Kernel].Launch(s.Grid, s.Block, s.Shared, r.stream, args...)
		case "gemm":
			err = r.gemm(s)
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
	if err := r.stream.Synchronize(); err != nil {
		return fmt.Errorf("exec: running the plan (set Options.SyncEach to find the step): %w", err)
	}
	return nil
}

// gemm issues one cuBLASLt matmul; K = 0 gives zeros.
func (r *runner) gemm(s codegen.Step) error {
	g := s.Gemm
	dt, err := tensor.ParseDType(g.DType)
	if err != nil {
		return err
	}
	es := int64(dt.Size())
	a, b, c := r.ptr(s.Args[0]), r.ptr(s.Args[1]), r.ptr(s.Args[2])
	c += cuda.DevicePtr(g.OffC * es)
	if g.K == 0 {
		return r.dev.Memset8(c, 0, int(g.M*g.N*max(g.Batch, 1)*es))
	}
	return r.blas.Gemm(r.stream, cuda.GemmParams{TransA: g.TransA, TransB: g.TransB,
		M: int(g.M), N: int(g.N), K: int(g.K),
		A: a + cuda.DevicePtr(g.OffA*es), B: b + cuda.DevicePtr(g.OffB*es), C: c,
		Batch: int(g.Batch), StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC,
		Type: dt, Alpha: 1})
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

// PlanArena assigns every allocated buffer of plan an offset in one arena and
// returns the offsets (by buffer id; -1 for inline and alias buffers) and the
// arena's size. A buffer lives from the first step that writes it to the last that
// reads it; parameters, constants and outputs live throughout.
func PlanArena(plan *codegen.Plan) (offs []int64, peak int64) {
	n := len(plan.Buffers)
	owner := func(id int) int {
		if plan.Buffers[id].Kind == "alias" {
			return plan.Buffers[id].AliasOf
		}
		return id
	}
	first := make([]int, n)
	last := make([]int, n)
	for i := range first {
		first[i], last[i] = math.MaxInt, -1
	}
	end := len(plan.Steps)
	for i, s := range plan.Steps {
		for _, a := range s.Args {
			o := owner(a)
			first[o] = min(first[o], i)
			last[o] = max(last[o], i)
		}
	}
	for _, b := range plan.Buffers {
		if b.Kind == "param" || b.Kind == "const" {
			first[b.ID], last[b.ID] = -1, end
		}
	}
	for _, o := range plan.Outputs {
		id := owner(o.ID)
		first[id] = min(first[id], -1)
		last[id] = end
	}
	var ids []int
	offs = make([]int64, n)
	for _, b := range plan.Buffers {
		offs[b.ID] = -1
		if b.Kind != "alias" && b.Kind != "inline" && last[b.ID] >= 0 {
			ids = append(ids, b.ID)
		}
	}
	// Largest first; ties by id keep the plan deterministic.
	sort.SliceStable(ids, func(i, j int) bool {
		return plan.Buffers[ids[i]].Bytes > plan.Buffers[ids[j]].Bytes
	})
	type placed struct {
		id        int
		off, size int64
	}
	var done []placed
	for _, id := range ids {
		size := (plan.Buffers[id].Bytes + arenaAlign - 1) / arenaAlign * arenaAlign
		var clash []placed
		for _, p := range done {
			if first[p.id] <= last[id] && first[id] <= last[p.id] {
				clash = append(clash, p)
			}
		}
		sort.Slice(clash, func(i, j int) bool { return clash[i].off < clash[j].off })
		var off int64
		for _, p := range clash {
			if off+size <= p.off {
				break
			}
			off = max(off, p.off+p.size)
		}
		offs[id] = off
		done = append(done, placed{id, off, size})
		peak = max(peak, off+size)
	}
	return offs, peak
}
