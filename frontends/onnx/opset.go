package onnx

import "fmt"

// SemanticsOpset is the newest default-domain opset whose every op lcc lowers
// with that version's semantics. Models may import up to MaxOpset: the ops that
// ONNX changed after SemanticsOpset are listed in newerVersions, and a node whose
// effective version is newer than lcc implements is refused by name.
const SemanticsOpset = 23

// newerVersions lists, for every default-domain op that ONNX (1.23.1, opset 28)
// defined anew after opset 23, those versions and the newest one lcc implements
// (23 or less: none of the newer ones). Read off onnx.defs.get_all_schemas_with_history
// by scripts/onnx_opset_changes.py.
var newerVersions = map[string]struct {
	versions    []int64
	implemented int64
}{
	// Only new element types (float8e8m0, int2/uint2, float6), and for Cast to
	// float8 a changed overflow table and round_mode: types lcc refuses at decoding.
	"Cast":            {[]int64{24, 25, 28}, 28},
	"CastLike":        {[]int64{24, 25}, 25},
	"Constant":        {[]int64{24, 25}, 25},
	"ConstantOfShape": {[]int64{24, 25}, 25},
	"Flatten":         {[]int64{24, 25}, 25},
	"Identity":        {[]int64{24, 25}, 25},
	"Reshape":         {[]int64{24, 25}, 25},
	"Shape":           {[]int64{24, 25}, 25},
	"Size":            {[]int64{24, 25}, 25},
	"Squeeze":         {[]int64{24, 25}, 25},
	"Transpose":       {[]int64{24, 25}, 25},
	"Unsqueeze":       {[]int64{24, 25}, 25},
	"Pad":             {[]int64{24, 25}, 25},
	// Range 27 adds stash_type for f16/bf16 (lcc computes start + i·delta in f64).
	"Range": {[]int64{27}, 27},
	// Mod 28 restates the semantics; ReduceLogSum(Exp) 28 drop integer types.
	"Mod":             {[]int64{28}, 28},
	"ReduceLogSum":    {[]int64{28}, 28},
	"ReduceLogSumExp": {[]int64{28}, 28},
	// Attention 24 adds nonpad_kv_seqlen, 25 left_window_size/right_window_size.
	"Attention": {[]int64{24, 25}, 25},
	// Changed ops lcc does not lower at any version.
	"BitCast": {[]int64{26}, 0}, "BitShift": {[]int64{28}, 0}, "CausalConvWithState": {[]int64{27}, 0},
	"Celu": {[]int64{28}, 0}, "Compress": {[]int64{28}, 0}, "CumProd": {[]int64{26}, 0},
	"DepthToSpace": {[]int64{28}, 0}, "DequantizeLinear": {[]int64{24, 25, 28}, 0},
	"Einsum": {[]int64{28}, 0}, "If": {[]int64{24, 25}, 0}, "LinearAttention": {[]int64{27}, 0},
	"Loop": {[]int64{24, 25}, 0}, "OneHot": {[]int64{28}, 0}, "Optional": {[]int64{28}, 0},
	"OptionalGetElement": {[]int64{28}, 0}, "OptionalHasElement": {[]int64{28}, 0},
	"QuantizeLinear": {[]int64{24, 25, 28}, 0}, "ReverseSequence": {[]int64{28}, 0},
	"Scan": {[]int64{24, 25}, 0}, "SpaceToDepth": {[]int64{28}, 0}, "SplitToSequence": {[]int64{24}, 0},
	"SwiGLU": {[]int64{28}, 0}, "Swish": {[]int64{24}, 0}, "TensorScatter": {[]int64{24}, 0},
	"TopK": {[]int64{24}, 0}, "Unique": {[]int64{28}, 0},
}

// opVersionError says why a default-domain op at the model's opset is refused:
// its effective version (the newest ≤ opset) is newer than lcc implements. nil
// when lcc implements it.
func opVersionError(op string, opset int64) error {
	nv, ok := newerVersions[op]
	if !ok || opset <= SemanticsOpset {
		return nil
	}
	var eff int64
	for _, v := range nv.versions {
		if v <= opset {
			eff = v
		}
	}
	if eff == 0 || eff <= nv.implemented {
		return nil
	}
	return fmt.Errorf("op %s at opset %d is version %d, newer than lcc implements (up to %d)", op, opset, eff,
		max(nv.implemented, SemanticsOpset))
}
