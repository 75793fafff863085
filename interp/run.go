package interp

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/lcc-dev/lcc/collective"
	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Options control how the interpreter runs.
type Options struct {
	// Precision is tensor.F32 (the default, also chosen by the zero value): float
	// results are rounded to their value's dtype after every op, as PyTorch does in
	// f32, bf16 or f16. tensor.F64 keeps full float64 precision for every float
	// value whatever its dtype, for finite-difference gradient checks.
	Precision tensor.DType
	// Store emulates a device's narrower storage (codegen/cuda's bf16 storage of
	// f32 values): where it gives a float dtype narrower than a value's own, the
	// value (a parameter or a node's result) is rounded further to it after the
	// usual rounding, as if stored so and read back. Math is unchanged. nil, or a
	// value's own dtype, stores it as itself; Precision = tensor.F64 ignores it.
	Store func(v *ir.Value) tensor.DType
	// Attention gives, for an attention node, the roundings its device kernels
	// make inside (attention.Rounding: the tensor-core kernels' bf16 operands), so
	// that the CPU computes what they compute. nil, or the zero Rounding, is exact
	// attention; Precision = tensor.F64 ignores it.
	Attention func(n *ir.Node) attention.Rounding
	// Comm connects this run to the other ranks of a sharded (SPMD) program; the
	// kernels of collective ops use it (collective.go). nil runs one rank alone.
	Comm collective.Communicator
}

// exact reports whether float results keep full float64 precision.
func (o Options) exact() bool { return o.Precision == tensor.F64 }

// rounding is the Rounding of attention node n (the zero one when exact).
func (o Options) rounding(n *ir.Node) attention.Rounding {
	if o.Attention == nil || o.exact() {
		return attention.Rounding{}
	}
	return o.Attention(n)
}

// stores returns the narrower dtype Store gives v, or v's own dtype.
func (o Options) stores(v *ir.Value) tensor.DType {
	dt := v.Type.DType
	if o.Store == nil || o.exact() || !dt.IsFloat() {
		return dt
	}
	if s := o.Store(v); s.IsFloat() && s.Size() < dt.Size() {
		return s
	}
	return dt
}

// Kernel computes one node: given its arguments (in n.Args order, with the types
// of n.Args) it returns one tensor per result, of the types of n.Results. Kernels
// compute in float64 and need not round: the interpreter rounds float results per
// Options. They must not mutate args.
type Kernel func(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error)

var (
	// Kernels register from init, but Register is exported and may run later
	// (a test swaps a kernel for one that fails) while other goroutines run:
	// reads take the read lock.
	kernelsMu sync.RWMutex
	// kernels is the op table's CPU column: TestEveryOpHasKernel fails on an op
	// without one.
	kernels = map[ir.Op]Kernel{}
	// noRound marks ops whose results are copies of argument elements (or of an
	// already rounded constant), so rounding them could change nothing; skipping it
	// also keeps the interpreter from writing into storage a result shares.
	noRound = map[ir.Op]bool{}
)

// Register installs the kernel of op, replacing any previous one. Features that add
// ops in their own files (collectives, optimizer updates) call it from init.
func Register(op ir.Op, k Kernel) {
	kernelsMu.Lock()
	defer kernelsMu.Unlock()
	kernels[op] = k
}

// registerMove registers a kernel whose results only move argument elements.
func registerMove(op ir.Op, k Kernel) {
	Register(op, k)
	noRound[op] = true
}

// HasKernel reports whether op has a kernel.
func HasKernel(op ir.Op) bool {
	kernelsMu.RLock()
	defer kernelsMu.RUnlock()
	return kernels[op] != nil
}

// lookup returns op's kernel, nil when it has none (exec's error says so).
func lookup(op ir.Op) Kernel {
	kernelsMu.RLock()
	defer kernelsMu.RUnlock()
	return kernels[op]
}

// Run executes f. inputs maps parameter names to tensors; a parameter with Data (a
// weight or optimizer state) uses its Data unless inputs overrides it. It returns
// the results by output name. Missing inputs, unknown input names and inputs whose
// dtype or shape differ from the parameter's type are errors.
func Run(f *ir.Func, inputs map[string]*tensor.Tensor, opts Options) (map[string]*tensor.Tensor, error) {
	vals, err := run(f, inputs, opts, false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*tensor.Tensor, len(f.Outputs))
	for _, o := range f.Outputs {
		out[o.Name] = vals[o.Value]
	}
	return out, nil
}

// RunValues is Run that keeps and returns every value of f (parameters and every
// node result), for tests and debugging. It holds the whole graph's tensors at once.
func RunValues(f *ir.Func, inputs map[string]*tensor.Tensor, opts Options) (map[*ir.Value]*tensor.Tensor, error) {
	return run(f, inputs, opts, true)
}

// EvalNode runs one node on args, as constant folding does. The node need not
// belong to a function: its result types are inferred from the op's Infer on the
// arguments' types, and n itself is not modified.
func EvalNode(n *ir.Node, args []*tensor.Tensor, opts Options) ([]*tensor.Tensor, error) {
	// EvalNode takes nodes straight from the importer, unverified: an op the
	// table does not know would make Info panic.
	if n.Op == ir.OpInvalid || int(n.Op) > len(ir.AllOps()) {
		return nil, fmt.Errorf("cpu: unknown op %d", n.Op)
	}
	info := n.Op.Info()
	if len(args) < info.MinArgs || (info.MaxArgs >= 0 && len(args) > info.MaxArgs) {
		return nil, fmt.Errorf("cpu: %s: %d args, want %d to %d", n.Where(), len(args),
			info.MinArgs, info.MaxArgs)
	}
	// A shadow node with fresh argument values, so that inference sees the
	// arguments' real types and n keeps its own.
	sn := &ir.Node{Op: n.Op, Attrs: n.Attrs, Name: n.Name}
	for i, a := range args {
		if a == nil {
			return nil, fmt.Errorf("cpu: %s: arg %d is nil", n.Where(), i)
		}
		sn.Args = append(sn.Args, &ir.Value{Type: ir.T(a.DType, a.Shape...)})
	}
	types, err := inferSafe(sn)
	if err != nil {
		return nil, fmt.Errorf("cpu: %s: %w", n.Where(), err)
	}
	for i, t := range types {
		sn.Results = append(sn.Results, &ir.Value{Type: t, Def: sn, Index: i})
	}
	// Rounded like a run's parameters: a folded constant is what the run would
	// have computed.
	args = slices.Clone(args)
	for i, a := range args {
		args[i] = roundedInput(a, opts)
	}
	return exec(sn, args, opts)
}

// inferSafe runs the op's Infer, turning a panic into an error.
func inferSafe(n *ir.Node) (ts []ir.Type, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("shape inference panicked: %v", r)
		}
	}()
	return n.Op.Info().Infer(n)
}

// run is Run and RunValues: it executes f's body in order, keeping each
// value until its last reader (or for good when keepAll), and returns the
// values kept.
func run(f *ir.Func, inputs map[string]*tensor.Tensor, opts Options,
	keepAll bool) (map[*ir.Value]*tensor.Tensor, error) {
	// Kernels trust the types they are given (the verifier checked them): a
	// malformed function is refused before any kernel runs.
	if err := ir.Verify(f); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	vals := make(map[*ir.Value]*tensor.Tensor, len(f.Params)+len(f.Body))
	if err := bindParams(f, inputs, opts, vals); err != nil {
		return nil, err
	}
	last, outputs := liveness(f)
	keep := func(v *ir.Value) bool { return keepAll || outputs[v] }
	// Values waiting for a later reader rest packed in float32 (pack.go), except in
	// float64 runs and where every value is returned.
	rest := map[*ir.Value]packed{}
	packing := !opts.exact() && !keepAll
	args := make([]*tensor.Tensor, 0, 8)
	held := make([]*tensor.Tensor, 0, 8) // the args that are vals' own tensors
	for i, n := range f.Body {
		args, held = args[:0], held[:0]
		for _, a := range n.Args {
			t, ok := vals[a]
			if ok {
				held = append(held, t)
			} else if p, ok := rest[a]; ok {
				t = p.unpack()
			}
			args = append(args, t)
		}
		res, err := exec(n, args, opts)
		if err != nil {
			return nil, fmt.Errorf("cpu: func @%s: node %d: %w", f.Name, i, err)
		}
		for j, r := range n.Results {
			if _, used := last[r]; !used && !keep(r) {
				continue
			}
			// A result that shares an argument's storage (a reshape) costs nothing
			// while the argument lives, so packing it would only double it.
			if packing && packs(r, i, last, outputs) && !sharesStorage(res[j], held) {
				rest[r] = pack(res[j])
			} else {
				vals[r] = res[j]
			}
		}
		// Drop what this node read last: the live set, and so memory, stays as on
		// the GPU (package doc's invariant).
		for _, a := range n.Args {
			if last[a] == i && !keep(a) {
				delete(vals, a)
				delete(rest, a)
			}
		}
	}
	return vals, nil
}

// liveness returns, for each value some node reads, the index of the last node
// reading it, and the set of f's outputs. A run drops a value after its last
// reader, and one read by no node and not returned as soon as it is made
// (HostPeak follows the same rule).
func liveness(f *ir.Func) (last map[*ir.Value]int, outputs map[*ir.Value]bool) {
	last = make(map[*ir.Value]int)
	for i, n := range f.Body {
		for _, a := range n.Args {
			last[a] = i
		}
	}
	outputs = make(map[*ir.Value]bool, len(f.Outputs)+len(f.Params))
	for _, o := range f.Outputs {
		outputs[o.Value] = true
	}
	return last, outputs
}

// bindParams resolves every parameter to a tensor from inputs or its Data
// (ir.Func.Bind), rounded to the dtype the run stores it in.
func bindParams(f *ir.Func, inputs map[string]*tensor.Tensor, opts Options,
	vals map[*ir.Value]*tensor.Tensor) error {
	ts, _, err := f.Bind(inputs, consistent)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	// Rounded in the order the GPU does it: to the parameter's dtype first, then
	// to its narrower storage.
	for i, p := range f.Params {
		t := roundedInput(ts[i], opts)
		if dt := opts.stores(p.Value); dt != t.DType {
			t = roundedCopy(t, dt)
		}
		vals[p.Value] = t
	}
	return nil
}

// consistent reports whether t's storage matches its dtype and shape, so that a
// malformed caller tensor is an input error rather than a kernel panic.
func consistent(t *tensor.Tensor) bool {
	n, err := tensor.Numel(t.Shape)
	if err != nil {
		return false
	}
	if t.DType.IsFloat() {
		return int64(len(t.F)) == n
	}
	return int64(len(t.I)) == n
}

// roundedInput returns t, or a rounded copy when t holds values its dtype cannot
// (callers may fill an f32 tensor with arbitrary float64s); t is never modified.
func roundedInput(t *tensor.Tensor, opts Options) *tensor.Tensor {
	if opts.exact() || !t.DType.IsFloat() || t.DType == tensor.F64 {
		return t
	}
	return roundedCopy(t, t.DType)
}

// roundedCopy returns t, or a copy of it rounded to dt (keeping t's dtype) when
// that changes an element; t is never modified.
func roundedCopy(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	// Most tensors are already rounded: scan first, and copy only when an
	// element would change, so a well-formed input is never copied.
	for _, v := range t.F {
		if roundScalar(v, dt) != v && v == v {
			c := t.Clone()
			roundFloats(c.F, dt)
			return c
		}
	}
	return t
}

// exec runs n's kernel, recovering panics and checking the results' types.
func exec(n *ir.Node, args []*tensor.Tensor, opts Options) (res []*tensor.Tensor, err error) {
	k := lookup(n.Op)
	if k == nil {
		return nil, fmt.Errorf("%s: no CPU kernel for op %s", n.Where(), n.Op)
	}
	for _, r := range n.Results {
		// Checked before the kernel allocates: a type may be far larger than a host holds.
		if _, err := tensor.HostBytes(r.Type.DType, r.Type.Shape); err != nil {
			return nil, fmt.Errorf("%s: result %w", n.Where(), err)
		}
	}
	// A panic inside a kernel (an index out of range on data the verifier
	// could not see) becomes an error naming the node: package doc's invariant.
	defer func() {
		if r := recover(); r != nil {
			res = nil
			if debugStacks {
				err = fmt.Errorf("%s: kernel panicked: %v\n%s", n.Where(), r, debug.Stack())
			} else {
				err = fmt.Errorf("%s: kernel panicked: %v", n.Where(), r)
			}
		}
	}()
	res, err = k(n, args, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Where(), err)
	}
	// A kernel's result count, dtype and shape are checked against the node, so
	// that a kernel bug is reported at its node, not as a wrong value far away.
	if len(res) != len(n.Results) {
		return nil, fmt.Errorf("%s: lcc: BUG: kernel returned %d results, want %d",
			n.Where(), len(res), len(n.Results))
	}
	for i, r := range n.Results {
		t := res[i]
		if t == nil || t.DType != r.Type.DType || !slices.Equal(t.Shape, r.Type.Shape) || !consistent(t) {
			got := "nil"
			if t != nil {
				got = t.DType.String() + tensor.ShapeString(t.Shape)
			}
			return nil, fmt.Errorf("%s: lcc: BUG: kernel result %d is %s, want %v", n.Where(), i, got, r.Type)
		}
		if !opts.exact() && !noRound[n.Op] && t.DType.IsFloat() {
			// Storage shared with an argument (or an earlier result) may be rounded
			// only where it changes, which it cannot for already-rounded data; fresh
			// storage takes the faster unconditional path.
			if sharesStorage(t, args) || sharesStorage(t, res[:i]) {
				roundFloats(t.F, t.DType)
			} else {
				roundFresh(t.F, t.DType)
			}
		}
		// Narrower storage. A result that shares storage (a move's, a constant's,
		// whose data belongs to its node) is rounded in a copy, if at all.
		if dt := opts.stores(r); dt != t.DType {
			if noRound[n.Op] || sharesStorage(t, args) || sharesStorage(t, res[:i]) {
				res[i] = roundedCopy(t, dt)
			} else {
				roundFresh(t.F, dt)
			}
		}
	}
	return res, nil
}

// debugStacks adds the kernel's stack to recovered panics; tests turn it on.
var debugStacks = false
