package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Options say what to generate for.
type Options struct {
	// Arch is the NVRTC architecture: "compute_80" (PTX for sm_80 and later) or
	// "sm_90". It is recorded in the plan; kernels compile for any arch.
	Arch string
	// Storage is how f32 values are stored on the device: tensor.F32 (the default,
	// also the zero value) or tensor.BF16. Math is fp32 either way.
	Storage tensor.DType
	// Rank is the rank a sharded program is built for (a rank-specific build:
	// shard_positions becomes this rank's positions).
	Rank int
	// ScalarAttention keeps every attention on the CUDA-core kernels, so that
	// `lcc check --attention-kernels=scalar` can hold the tensor-core tier's
	// results beside theirs on the same model.
	ScalarAttention bool
	// NoCUDAGraph records in the plan that its steps run uncaptured
	// (lcc train --cuda-graph=off), for comparison with the captured step.
	NoCUDAGraph bool
}

// Param is one kernel parameter: a pointer to a buffer.
type Param struct {
	Name  string `json:"name"`
	CType string `json:"ctype"` // element type, e.g. "float" or "lcc_bf16"
	Out   bool   `json:"out"`   // written by the kernel
}

// Kernel is one generated CUDA kernel. Sizes are baked into Source, so a kernel
// serves every launch of its family on the same shapes and dtypes.
type Kernel struct {
	// Name is the entry point, unique per source: the family and a hash.
	Name string
	// Op is the family: "elementwise", "reduce_sum", "attention", ...
	Op string
	// Source is a complete CUDA C++ translation unit (prelude included).
	Source string
	// Entry is the extern "C" function to launch (equal to Name).
	Entry string
	// Grid, Block and Shared are the launch shape (dynamic shared memory bytes).
	Grid, Block [3]uint32
	Shared      uint32
	// Params lists the kernel's pointer parameters in order; a launch passes one
	// buffer id per parameter.
	Params []Param
	// Arch is the architecture the kernel must be compiled for ("sm_90a":
	// flash tier 2's wgmma), or "" for the device's own.
	Arch string
}

// Body is the kernel's source after the prelude every kernel shares: what golden
// tests compare.
func (k Kernel) Body() string { return strings.TrimPrefix(k.Source, prelude) }

// Buffer is one device buffer of the plan: an IR value or a temporary.
type Buffer struct {
	ID    int     `json:"id"`
	DType string  `json:"dtype"` // storage dtype on the device
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
	// Kind is "param" (uploaded from inputs or weights), "const" (uploaded from
	// the constants file), "value" (computed), "alias" (a reshape: the memory of
	// AliasOf), "inline" (folded into every kernel that reads it, never
	// allocated), "host" (an offloaded value in pinned host memory, outside the
	// arena: offload.go) or "temp" (scratch of one launch).
	Kind    string `json:"kind"`
	AliasOf int    `json:"alias_of,omitempty"`
	Name    string `json:"name,omitempty"` // the parameter's name
	Role    string `json:"role,omitempty"` // the parameter's role
}

// Gemm is a cuBLASLt matmul in row-major terms (see runtime/cuda.GemmParams):
// C[OffC:] = Alpha·op(A[OffA:])·op(B[OffB:]) + Beta·C[OffC:] over Batch matrices.
// Offsets and strides count elements. Beta = 1 accumulates into C (the fused
// cross-entropy sums dw over row chunks so).
type Gemm struct {
	TransA  bool   `json:"trans_a,omitempty"`
	TransB  bool   `json:"trans_b,omitempty"`
	M       int64  `json:"m"`
	N       int64  `json:"n"`
	K       int64  `json:"k"`
	Batch   int64  `json:"batch"`
	StrideA int64  `json:"stride_a"`
	StrideB int64  `json:"stride_b"`
	StrideC int64  `json:"stride_c"`
	OffA    int64  `json:"off_a,omitempty"`
	OffB    int64  `json:"off_b,omitempty"`
	OffC    int64  `json:"off_c,omitempty"`
	DType   string `json:"dtype"`
	// CType is C's dtype when it differs from A's and B's ("f32" for bf16 inputs
	// accumulating in fp32); "" means DType.
	CType string  `json:"ctype,omitempty"`
	Alpha float32 `json:"alpha"`
	Beta  float32 `json:"beta,omitempty"`
}

// Step is one launch of the plan: a generated kernel, a GEMM or a collective.
type Step struct {
	Kind   string    `json:"kind"`             // "kernel", "gemm", "collective", "d2h", "h2d" or "wait"
	Node   int       `json:"node"`             // index in Func.Body of the (last) node
	Op     string    `json:"op"`               // the family or "matmul"
	Kernel string    `json:"kernel,omitempty"` // Kernel.Name
	Grid   [3]uint32 `json:"grid,omitzero"`
	Block  [3]uint32 `json:"block,omitzero"`
	Shared uint32    `json:"shared,omitempty"`
	// Args are buffer ids: one per kernel parameter, A, B, C for a GEMM, or the
	// input and the result of a collective (and of the wait that joins it).
	Args []int `json:"args"`
	// Offs, when present, has one element offset per kernel argument: the
	// kernel gets a pointer that many elements (of the buffer's dtype) into the
	// buffer. It lets one kernel serve every chunk of a chunked loop.
	Offs []int64     `json:"offs,omitempty"`
	Gemm *Gemm       `json:"gemm,omitempty"`
	Coll *Collective `json:"collective,omitempty"`
}

// Output is a named result of the function.
type Output struct {
	Name string `json:"name"`
	ID   int    `json:"id"`
}

// LaunchPlan is the ordered launch list of one function.
type LaunchPlan struct {
	Func    string   `json:"func"`
	Arch    string   `json:"arch"`
	Storage string   `json:"storage"`
	Buffers []Buffer `json:"buffers"`
	Steps   []Step   `json:"steps"`
	Outputs []Output `json:"outputs"`
	// Graph says whether the executor captures the steps as a CUDA graph
	// (PlanGraph); the program hash covers it.
	Graph Graph `json:"cuda_graph"`
	// OptimizerState is OptimizerStateHost when the trainer keeps a training
	// step's AdamW state in pinned host memory (driver.Options.OptimizerState),
	// "" when on the device: the executor's choice of optimizer, which the
	// program hash covers.
	OptimizerState string `json:"optimizer_state,omitempty"`
	// OptimizerUpdate is OptimizerUpdateGPU when that host state is updated on
	// the GPU, streamed through device windows (driver.Options.OptimizerUpdate),
	// "" when on the CPU; the program hash covers it.
	OptimizerUpdate string `json:"optimizer_update,omitempty"`
	// Fused says the step was compiled with --fuse=on (driver.Options.Fuse), so
	// the program hash covers the choice even where fuse found nothing to fuse.
	Fused bool `json:"fused,omitempty"`
	// Constants maps a "const" buffer id to its value (written to
	// constants.safetensors under the name "%<id>").
	Constants map[int]*tensor.Tensor `json:"-"`
}

// Program is what Build produces: the distinct kernels and the plan using them.
type Program struct {
	Kernels []Kernel
	Plan    *LaunchPlan
	// Attention says, for every attention node in body order, which kernels it
	// runs on (the report prints it).
	Attention []AttentionChoice
}

// Generate returns the kernels of f for arch with f32 storage, in order of first
// use. It is Build without the plan.
func Generate(f *ir.Func, arch string) ([]Kernel, error) {
	p, err := Build(f, Options{Arch: arch})
	if err != nil {
		return nil, err
	}
	return p.Kernels, nil
}

// Build lowers f to kernels and a launch plan. f must verify. An op with no GPU
// lowering is an error naming the node.
func Build(f *ir.Func, opts Options) (*Program, error) {
	// The zero Options stores f32, as the interpreter computes; bf16 storage
	// is the only narrower form the kernels implement.
	if opts.Storage == tensor.Invalid {
		opts.Storage = tensor.F32
	}
	if opts.Storage != tensor.F32 && opts.Storage != tensor.BF16 {
		return nil, fmt.Errorf("codegen/cuda: storage %v: want f32 or bf16", opts.Storage)
	}
	if err := ir.Verify(f); err != nil {
		return nil, fmt.Errorf("codegen/cuda: %w", err)
	}
	g := &gen{f: f, opts: opts, ids: map[*ir.Value]int{}, byName: map[string]int{},
		uses: f.Uses(), outputs: f.OutputSet(), prog: &Program{Plan: &LaunchPlan{Func: f.Name, Arch: opts.Arch,
			Storage: opts.Storage.String(), Constants: map[int]*tensor.Tensor{}}}}
	if err := g.buffers(); err != nil {
		return nil, err
	}
	// The plans run in this order, before any kernel is rendered: views decide
	// which values need no buffer of their own, residual fusion which adds a
	// norm absorbs (it reads the views), and recomputation which elementwise
	// values are not stored at all (it needs both). lower then reads all three.
	g.planViews()
	g.planResiduals()
	g.planRecompute()
	if err := g.lower(); err != nil {
		return nil, err
	}
	for _, o := range f.Outputs {
		g.prog.Plan.Outputs = append(g.prog.Plan.Outputs, Output{Name: o.Name, ID: g.ids[o.Value]})
	}
	// Both read the finished step list: deferWaits puts each asynchronous
	// step's wait before its first reader, and PlanGraph then decides whether
	// the plan can run as one captured CUDA graph.
	deferWaits(g.prog.Plan)
	g.prog.Plan.Graph = PlanGraph(g.prog.Plan, opts.NoCUDAGraph)
	return g.prog, nil
}

// gen is the state of one Build.
type gen struct {
	f      *ir.Func
	opts   Options
	ids    map[*ir.Value]int
	byName map[string]int // kernel name → index in prog.Kernels
	uses   map[*ir.Value][]*ir.Node
	// outputs is f's result values (f.IsOutput per value is quadratic).
	outputs map[*ir.Value]bool
	prog    *Program
	node    int // the body index being lowered
	// views holds the values that live in another value's buffer, placed those
	// of them that a concat's operand producer writes (view.go).
	views  map[*ir.Value]view
	placed map[*ir.Value]bool
	// flashNodes marks the attention nodes on the flash kernels, which read
	// views and write placed values too (attention_views.go).
	flashNodes map[*ir.Node]bool
	// resid maps a norm (or norm gradient) to the residual add its kernel
	// absorbs; absorbed marks those adds (residual.go).
	resid    map[*ir.Node]*ir.Node
	absorbed map[*ir.Node]bool
	// recompute marks elementwise values their readers compute again
	// (recompute.go).
	recompute map[*ir.Value]bool
}

// storageOf is the device dtype of v: f32 values take Options.Storage, except
// attention's lse, which stays f32 for the backward's exp(s − lse), a loss
// (scalarF32), and reshapes, which share their operand's memory and so its dtype.
func (g *gen) storageOf(v *ir.Value) tensor.DType {
	dt := v.Type.DType
	if dt != tensor.F32 || g.opts.Storage == tensor.F32 {
		return dt
	}
	if v.Def != nil && (v.Def.Op == ir.OpReshape || v.Def.Op == ir.OpOffload || v.Def.Op == ir.OpPrefetch) {
		return g.storageOf(v.Def.Args[0]) // an alias has its memory's dtype; a copy its source's
	}
	// Attention's second result is its lse, kept f32 for the backward's
	// exp(s − lse): bf16 would round an lse near 10 by up to 0.03, a 3% error in
	// every probability the backward recomputes.
	if v.Def != nil && v.Index == 1 && (v.Def.Op == ir.OpAttention || v.Def.Op == ir.OpDilatedAttention ||
		v.Def.Op == ir.OpRingAttention || v.Def.Op == ir.OpShardedDilatedAttention) {
		return tensor.F32
	}
	if v.Def != nil && v.Type.Numel() == 1 && scalarF32[v.Def.Op] {
		return tensor.F32
	}
	if v.Def != nil && v.Type.Numel() == 1 && v.Def.Op == ir.OpAllReduce {
		return g.storageOf(v.Def.Args[0]) // a sharded loss's sum over ranks, stored as the rank's
	}
	return g.opts.Storage
}

// scalarF32 are the ops whose one-element results stay f32 whatever the storage:
// the loss (a reduction, never a view of another buffer), which the host reads
// back, prints and records, and which bf16 would round to three digits (10.5,
// 9.25, 7.5625); one number costs nothing to keep.
var scalarF32 = map[ir.Op]bool{
	ir.OpReduceSum: true, ir.OpReduceMean: true, ir.OpSoftmaxCrossEntropy: true, ir.OpNLLLoss: true,
	ir.OpFusedLinearCrossEntropy: true,
}

// inlinable reports whether v can be folded into elementwise kernels as a
// literal: a full, or a constant with one element.
func inlinable(v *ir.Value) (float64, bool) {
	if v.Def == nil {
		return 0, false
	}
	switch v.Def.Op {
	case ir.OpFull:
		return v.Def.AttrFloat("value"), true
	case ir.OpConstant:
		t := v.Def.AttrTensor("value")
		if t != nil && t.Numel() == 1 {
			if t.DType.IsFloat() {
				return t.F[0], true
			}
			return float64(t.I[0]), true
		}
	}
	return 0, false
}

// buffers numbers every value as ir.Print does and records its buffer.
func (g *gen) buffers() error {
	pl := g.prog.Plan
	add := func(v *ir.Value, kind string) *Buffer {
		// Ids follow ir.Print's numbering (parameters, then results in body order),
		// so a buffer id in launch_plan.json is the %N of the printed IR.
		id := len(g.ids)
		g.ids[v] = id
		dt := g.storageOf(v)
		pl.Buffers = append(pl.Buffers, Buffer{ID: id, DType: dt.String(),
			Shape: append([]int64{}, v.Type.Shape...), Bytes: v.Type.Numel() * int64(dt.Size()), Kind: kind})
		return &pl.Buffers[len(pl.Buffers)-1]
	}
	for _, p := range g.f.Params {
		if !supported(p.Value.Type.DType) {
			return fmt.Errorf("codegen/cuda: parameter %q: dtype %v has no device form", p.Name, p.Value.Type.DType)
		}
		b := add(p.Value, "param")
		b.Name, b.Role = p.Name, p.Role.String()
	}
	for i, n := range g.f.Body {
		for _, r := range n.Results {
			if !supported(r.Type.DType) {
				return fmt.Errorf("codegen/cuda: node %d (%s): dtype %v has no device form", i, n.Where(), r.Type.DType)
			}
			kind := "value"
			switch n.Op {
			case ir.OpConstant:
				kind = "const"
			case ir.OpReshape:
				kind = "alias"
			// An offloaded value lives in pinned host memory until its prefetch.
			case ir.OpOffload:
				kind = "host"
			}
			b := add(r, kind)
			if kind == "alias" {
				b.AliasOf = g.ids[n.Args[0]]
				// An alias of an alias points at the memory's owner.
				for pl.Buffers[b.AliasOf].Kind == "alias" {
					b.AliasOf = pl.Buffers[b.AliasOf].AliasOf
				}
			}
			if kind == "const" {
				pl.Constants[b.ID] = n.AttrTensor("value")
			}
		}
	}
	// A full read only by elementwise kernels (which inline it) is never stored.
	for _, n := range g.f.Body {
		if n.Op != ir.OpFull {
			continue
		}
		r := n.Result()
		if g.outputs[r] {
			continue
		}
		all := true
		for _, u := range g.uses[r] {
			all = all && readsElementwise(u)
		}
		if all {
			pl.Buffers[g.ids[r]].Kind = "inline"
		}
	}
	return nil
}

// readsElementwise says whether u reads its operands through an elementwise
// kernel's loads (an elementwise op or a fused group), which inline literals,
// recompute values and read views in place.
func readsElementwise(u *ir.Node) bool {
	return u.Op.Info().Elementwise || u.Op == ir.OpFusedElementwise
}

// temp adds a scratch buffer for the current launch and returns its id.
func (g *gen) temp(dt tensor.DType, shape ...int64) int {
	pl := g.prog.Plan
	id := len(pl.Buffers)
	// Temporaries get ids after every value, in the order they are asked for;
	// PlanArena gives them memory by their lifetimes like any other buffer.
	pl.Buffers = append(pl.Buffers, Buffer{ID: id, DType: dt.String(), Shape: shape,
		Bytes: prod(shape) * int64(dt.Size()), Kind: "temp"})
	return id
}

// lowerFunc lowers one node; elementwise nodes are handled by the fusion pass.
type lowerFunc func(g *gen, n *ir.Node) error

// lowering is the table of non-elementwise ops; elementwise ops are rendered
// from the expression tables in elementwise.go.
var lowering map[ir.Op]lowerFunc

func init() {
	lowering = map[ir.Op]lowerFunc{
		ir.OpConstant: func(*gen, *ir.Node) error { return nil }, // uploaded
		ir.OpReshape:  func(*gen, *ir.Node) error { return nil }, // an alias
		ir.OpFull:     lowerFull,
		ir.OpRange:    lowerRange,

		ir.OpReduceSum:     lowerReduce,
		ir.OpReduceMean:    lowerReduce,
		ir.OpReduceMax:     lowerReduce,
		ir.OpReduceMin:     lowerReduce,
		ir.OpSoftmax:       lowerSoftmax,
		ir.OpLogSoftmax:    lowerSoftmax,
		ir.OpLayerNorm:     lowerNorm,
		ir.OpRMSNorm:       lowerNorm,
		ir.OpRMSNormGrad:   lowerRMSNormGrad,
		ir.OpLayerNormGrad: lowerRMSNormGrad,
		ir.OpCumSum:        lowerCumSum,

		ir.OpMatMul: lowerMatMul,

		ir.OpFusedElementwise: lowerFusedElementwise,

		ir.OpTranspose:      lowerTranspose,
		ir.OpExpand:         lowerExpand,
		ir.OpSlice:          lowerSlice,
		ir.OpTile:           lowerTile,
		ir.OpConcat:         lowerConcat,
		ir.OpSplit:          lowerSplit,
		ir.OpTrilu:          lowerTrilu,
		ir.OpGather:         lowerGather,
		ir.OpGatherElements: lowerGatherElements,
		ir.OpGatherND:       lowerGatherND,
		ir.OpScatterAdd:     lowerScatterAdd,

		ir.OpSoftmaxCrossEntropy: lowerLoss,
		ir.OpNLLLoss:             lowerLoss,

		ir.OpFusedLinearCrossEntropy:     lowerFLCE,
		ir.OpFusedLinearCrossEntropyGrad: lowerFLCEGrad,

		ir.OpAttention:            lowerAttention,
		ir.OpAttentionGrad:        lowerAttentionGrad,
		ir.OpDilatedAttention:     lowerAttention,
		ir.OpDilatedAttentionGrad: lowerAttentionGrad,

		ir.OpAllReduce:      lowerCollective,
		ir.OpAllGather:      lowerCollective,
		ir.OpReduceScatter:  lowerCollective,
		ir.OpAllToAll:       lowerCollective,
		ir.OpRingShift:      lowerCollective,
		ir.OpShardPositions: lowerShardPositions,

		ir.OpOffload:  lowerOffload,
		ir.OpPrefetch: lowerPrefetch,

		ir.OpRingAttention:               lowerShardedAttention,
		ir.OpRingAttentionGrad:           lowerShardedAttention,
		ir.OpShardedDilatedAttention:     lowerShardedAttention,
		ir.OpShardedDilatedAttentionGrad: lowerShardedAttention,
	}
}

// lower walks the body, fusing elementwise runs and lowering the rest.
func (g *gen) lower() error {
	var run fusion
	flush := func() error {
		if len(run.nodes) == 0 {
			return nil
		}
		err := g.elementwise(&run)
		run = fusion{}
		return err
	}
	for i, n := range g.f.Body {
		g.node = i
		if g.absorbed[n] {
			continue // its norm's kernel computes it
		}
		info := n.Op.Info()
		if info.Elementwise {
			// A new output shape closes the run: one kernel covers one index space.
			if !run.accepts(n) {
				if err := flush(); err != nil {
					return err
				}
			}
			run.add(i, n)
			continue
		}
		// A node that reads the open run's results must come after its kernel.
		if run.feeds(n) || g.resid[n] != nil && run.feeds(g.resid[n]) {
			if err := flush(); err != nil {
				return err
			}
		}
		if n.Op == ir.OpFull && g.prog.Plan.Buffers[g.ids[n.Result()]].Kind == "inline" {
			continue
		}
		if n.Op != ir.OpSplit && g.isView(n) {
			continue // its readers index its argument in place
		}
		lf := lowering[n.Op]
		if lf == nil {
			return fmt.Errorf("codegen/cuda: node %d (%s): no GPU lowering for op %s", i, n.Where(), n.Op)
		}
		if err := lf(g, n); err != nil {
			return fmt.Errorf("codegen/cuda: node %d (%s): %w", i, n.Where(), err)
		}
	}
	// The last run's kernel is attributed to the last node, after the loop.
	g.node = len(g.f.Body) - 1
	return flush()
}

// kernelSpec is what a family renders: the body after the prelude, with
// @KERNEL@ standing for the entry name.
type kernelSpec struct {
	op          string
	body        string
	grid, block [3]uint32
	shared      uint32
	params      []Param
	args        []int
	offs        []int64 // element offsets per arg (nil: none)
	arch        string  // Kernel.Arch
}

// emit adds the kernel (deduplicated by source) and a step launching it.
func (g *gen) emit(s kernelSpec) {
	if s.grid[0] == 0 || s.grid[1] == 0 || s.grid[2] == 0 {
		return // no work: an empty tensor
	}
	// Named by content: equal kernels (the same op over the same shapes) share
	// one entry, and a kernel's name is the same in every compile.
	sum := sha256.Sum256([]byte(s.op + "\x00" + s.body))
	name := strings.ReplaceAll(s.op, ".", "_") + "_" + hex.EncodeToString(sum[:8])
	if _, ok := g.byName[name]; !ok {
		src := prelude + strings.ReplaceAll(s.body, "@KERNEL@", name)
		g.byName[name] = len(g.prog.Kernels)
		g.prog.Kernels = append(g.prog.Kernels, Kernel{Name: name, Op: s.op, Source: src, Entry: name,
			Grid: s.grid, Block: s.block, Shared: s.shared, Params: s.params, Arch: s.arch})
	}
	g.prog.Plan.Steps = append(g.prog.Plan.Steps, Step{Kind: "kernel", Node: g.node, Op: s.op,
		Kernel: name, Grid: s.grid, Block: s.block, Shared: s.shared, Args: s.args, Offs: s.offs})
}

// param makes a kernel parameter for value v.
func (g *gen) param(name string, v *ir.Value, out bool) Param {
	return Param{Name: name, CType: storageC[g.storageOf(v)], Out: out}
}

// OptimizerStateHost is LaunchPlan.OptimizerState for AdamW's state in pinned
// host memory.
const OptimizerStateHost = "host"

// OptimizerUpdateGPU is Plan.OptimizerUpdate when the host state is updated on
// the GPU.
const OptimizerUpdateGPU = "gpu"
