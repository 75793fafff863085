package driver

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// emulation returns the interpreter's options under which the CPU computes what
// prog, f's program for a device with the given storage, computes there: it
// rounds what the device stores (storedIn) and, in each attention that runs on
// the tensor-core kernels, the bf16 operands those kernels make inside
// (flashRoundings). prog nil means f's program for an sm_80 GPU (buildFor); f32
// storage emulates nothing.
// The note says which kernels' roundings it models ("" when none).
func emulation(f *ir.Func, storage tensor.DType, prog *cudagen.Program) (interp.Options, string, error) {
	opts := interp.Options{Precision: tensor.F32}
	if storage == tensor.F32 || storage == tensor.Invalid {
		return opts, "", nil
	}
	if prog == nil {
		var err error
		if prog, err = buildFor(f, storage); err != nil {
			return opts, "", err
		}
	}
	store, err := storedIn(f, prog)
	if err != nil {
		return opts, "", err
	}
	rounding, note, err := flashRoundings(f, prog)
	if err != nil {
		return opts, "", err
	}
	opts.Store, opts.Attention = store, rounding
	return opts, note, nil
}

// flashRoundings returns, for each attention node of f that prog runs on the
// tensor-core kernels (Program.Attention), the roundings of its tier's kernels:
// bf16 P and dS operands and the forward's key tile (attention.Rounding).
// Comparing a device's flash attention with exact attention on the CPU would
// hold it to errors the kernels make by design: on trajectory/qwen2_d64 (peaked
// softmax, large key biases) they alone move the gradients by about 2e-2
// (TestFlashRoundingsQwen2). Other nodes, and ring blocks, are exact.
// The note names them, e.g. "4 attention nodes on the tensor-core kernels (tier 2,
// key tiles 128)".
func flashRoundings(f *ir.Func, prog *cudagen.Program) (func(*ir.Node) attention.Rounding, string, error) {
	by := map[*ir.Node]attention.Rounding{}
	tiers, tiles := map[int]bool{}, map[int]bool{}
	for _, c := range prog.Attention {
		if c.Node < 0 || c.Node >= len(f.Body) || f.Body[c.Node].Op.String() != c.Op {
			return nil, "", fmt.Errorf("lcc: BUG: the program's attention choice %d (%s) is not a node of %s",
				c.Node, c.Op, f.Name)
		}
		n := f.Body[c.Node]
		switch n.Op {
		case ir.OpAttention, ir.OpAttentionGrad, ir.OpDilatedAttention, ir.OpDilatedAttentionGrad:
		default:
			continue
		}
		if c.Kernel == cudagen.KernelFlash {
			tile := cudagen.FlashDescOf(n, c.Tier).Bc
			by[n] = attention.Rounding{KeyTile: tile, Operand: roundBF16}
			tiers[c.Tier], tiles[tile] = true, true
		}
	}
	if len(by) == 0 {
		return nil, "", nil
	}
	note := fmt.Sprintf("%d attention nodes on the tensor-core kernels (tier %s, key tiles %s)", len(by),
		listSet(tiers), listSet(tiles))
	return func(n *ir.Node) attention.Rounding { return by[n] }, note, nil
}

// listSet lists the keys of set in increasing order, separated by "/".
func listSet(set map[int]bool) string {
	var ks []int
	for k := range set {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var out []string
	for _, k := range ks {
		out = append(out, strconv.Itoa(k))
	}
	return strings.Join(out, "/")
}

// roundBF16 rounds x to bf16 as the kernels' cvt.rn.bf16x2.f32 does, from the
// float32 they hold.
func roundBF16(x float64) float64 {
	return float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(x))))
}
