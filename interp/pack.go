package interp

import (
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// Values at rest in 4 bytes an element. A kernel reads and writes float64 (it
// accumulates so), and the interpreter rounds every float result to its dtype, so
// an f32, bf16 or f16 value holds only numbers a float32 represents exactly. A value
// that waits across nodes for a later reader (an activation the backward reads) is
// kept meanwhile as a packed []float32 and unpacked for each reader: the same bits,
// half the memory. Values read by the very next node, f64 values, outputs, runs in
// float64 (Options.Precision = tensor.F64) and results that share storage (views)
// stay float64 tensors.

// packMin is the fewest elements worth packing.
const packMin = 1024

// views are the ops whose result may share its storage with an argument or its
// node (a constant's data): packing one would copy, not halve.
var views = map[ir.Op]bool{ir.OpConstant: true, ir.OpReshape: true, ir.OpOffload: true,
	ir.OpPrefetch: true}

// packed is a float value at rest: its dtype, shape and elements as float32.
type packed struct {
	dt    tensor.DType
	shape []int64
	data  []float32
}

// packs reports whether a run packs v, made by body node i, until its readers:
// HostPeak and run decide with the same rule.
func packs(v *ir.Value, i int, last map[*ir.Value]int, outputs map[*ir.Value]bool) bool {
	dt := v.Type.DType
	return dt.IsFloat() && dt != tensor.F64 && !outputs[v] && v.Def != nil && !views[v.Def.Op] &&
		last[v] > i+1 && v.Type.Numel() >= packMin
}

// pack copies t's elements to float32; they must be exact there (see above).
func pack(t *tensor.Tensor) packed {
	p := packed{dt: t.DType, shape: t.Shape, data: make([]float32, len(t.F))}
	parallelRange(len(t.F), 1, func(lo, hi int) {
		for i, v := range t.F[lo:hi] {
			p.data[lo+i] = float32(v)
		}
	})
	return p
}

// unpack returns p as a fresh float64 tensor.
func (p packed) unpack() *tensor.Tensor {
	t := &tensor.Tensor{DType: p.dt, Shape: p.shape, F: make([]float64, len(p.data))}
	parallelRange(len(p.data), 1, func(lo, hi int) {
		for i, v := range p.data[lo:hi] {
			t.F[lo+i] = float64(v)
		}
	})
	return t
}
