package cuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/codegen/cuda/clit"
	"github.com/lcc-dev/lcc/tensor"
)

// storageC is the C type of an element in device memory, per dtype.
// bf16 and f16 are the prelude's structs, not CUDA's headers (NVRTC lacks them);
// bool is stored as unsigned char, one byte per element as on the host.
var storageC = map[tensor.DType]string{
	tensor.F32: "float", tensor.BF16: "lcc_bf16", tensor.F16: "lcc_f16", tensor.F64: "double",
	tensor.I64: "long long", tensor.I32: "int", tensor.I8: "signed char",
	tensor.U8: "unsigned char", tensor.Bool: "unsigned char",
}

// computeC is the C type kernels compute in, per dtype: fp32 for every float
// storage (f64 stays double), int64 for integers.
// Narrow floats compute in fp32, as the CPU interpreter does; resultFmt rounds
// back after each op so both agree.
var computeC = map[tensor.DType]string{
	tensor.F32: "float", tensor.BF16: "float", tensor.F16: "float", tensor.F64: "double",
	tensor.I64: "long long", tensor.I32: "long long", tensor.I8: "long long",
	tensor.U8: "long long", tensor.Bool: "bool",
}

// accC is the accumulator type of reductions and scans: bools count as integers.
func accC(dt tensor.DType) string {
	if dt == tensor.Bool {
		return "long long"
	}
	return computeC[dt]
}

// loadFmt converts a storage element (%s) to its compute type.
var loadFmt = map[tensor.DType]string{
	tensor.F32: "%s", tensor.BF16: "lcc_tof(%s)", tensor.F16: "lcc_tof(%s)", tensor.F64: "%s",
	tensor.I64: "%s", tensor.I32: "(long long)(%s)", tensor.I8: "(long long)(%s)",
	tensor.U8: "(long long)(%s)", tensor.Bool: "((%s) != 0)",
}

// storeFmt converts a compute value (%s) to storage; narrowing integers wrap as
// two's-complement machines do, like the CPU interpreter.
var storeFmt = map[tensor.DType]string{
	tensor.F32: "(float)(%s)", tensor.BF16: "lcc_bf16_of((float)(%s))",
	tensor.F16: "lcc_f16_of((float)(%s))", tensor.F64: "(double)(%s)",
	tensor.I64: "(long long)(%s)", tensor.I32: "(int)(%s)", tensor.I8: "(signed char)(%s)",
	tensor.U8: "(unsigned char)(%s)", tensor.Bool: "(unsigned char)((%s) != 0)",
}

// load and store apply loadFmt and storeFmt to an expression.
func load(dt tensor.DType, expr string) string  { return fmt.Sprintf(loadFmt[dt], expr) }
func store(dt tensor.DType, expr string) string { return fmt.Sprintf(storeFmt[dt], expr) }

// supported reports whether dt has a device representation.
func supported(dt tensor.DType) bool { _, ok := storageC[dt]; return ok }

// dlit renders v as a C double literal.
func dlit(v float64) string {
	// inf and NaN have no C literal; spell their bit patterns instead.
	if math.IsInf(v, 0) || v != v {
		return fmt.Sprintf("__longlong_as_double(0x%016xLL)", math.Float64bits(v))
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	// "1" would be an int literal in C and change the type of the expression.
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// ilit renders an int64 literal.
func ilit(v int64) string {
	// -9223372036854775808LL parses as the negation of a literal that does not fit.
	if v == math.MinInt64 {
		return "(-9223372036854775807LL - 1)"
	}
	return strconv.FormatInt(v, 10) + "LL"
}

// literal renders v as a constant of dtype dt's compute type.
func literal(dt tensor.DType, v float64) string {
	switch {
	case dt == tensor.F64:
		return dlit(v)
	case dt.IsFloat():
		return clit.Float(v)
	case dt == tensor.Bool:
		if v != 0 {
			return "true"
		}
		return "false"
	}
	// Wrap to the dtype first, so a literal means what the interpreter computes.
	return ilit(tensor.WrapInt(int64(v), dt))
}

// idxType is the index type for n elements (plus the grid stride): int when it
// cannot overflow, else long long.
func idxType(n int64) string {
	// The 2^28 margin below 2^31 is the largest grid stride (flatGrid: 2^20 blocks
	// of 256), so i += stride cannot overflow int before the loop test fails.
	if n < 1<<31-1<<28 {
		return "int"
	}
	return "long long"
}

// prod is the product of dims.
func prod(s []int64) int64 { return tensor.Elements[int64](s) }

// stridesOf returns row-major strides.
func stridesOf(shape []int64) []int64 { return tensor.Strides[int64](shape) }

// bcastStrides returns in's strides viewed as out under numpy broadcasting.
func bcastStrides(in, out []int64) []int64 { return tensor.BroadcastStrides[int64](in, out) }

// coords emits statements splitting index variable lin over shape into
// p0..p{r-1} (the innermost dim first, so divisions are by constants).
func coords(p, lin, it string, shape []int64) string {
	var sb strings.Builder
	r := len(shape)
	if r == 0 {
		return ""
	}
	fmt.Fprintf(&sb, "    %s %s_r = %s;\n", it, p, lin)
	// Constant divisors let nvcc turn each % and / into multiplies and shifts.
	for d := r - 1; d > 0; d-- {
		fmt.Fprintf(&sb, "    const %s %s%d = %s_r %% %d; %s_r /= %d;\n", it, p, d, p, shape[d], p, shape[d])
	}
	fmt.Fprintf(&sb, "    const %s %s0 = %s_r;\n", it, p, p)
	return sb.String()
}

// offset renders Σ p_d·st_d, leaving out zero strides.
func offset(p string, st []int64) string {
	var terms []string
	for d, s := range st {
		switch {
		case s == 0:
		case s == 1:
			terms = append(terms, fmt.Sprintf("%s%d", p, d))
		default:
			terms = append(terms, fmt.Sprintf("%s%d * %d", p, d, s))
		}
	}
	if len(terms) == 0 {
		return "0"
	}
	return strings.Join(terms, " + ")
}

// gridStride opens the usual grid-stride loop over n elements with index i.
func gridStride(it string, n int64) string {
	return fmt.Sprintf("  for (%s i = (%s)blockIdx.x * blockDim.x + threadIdx.x; i < (%s)%d; i += (%s)gridDim.x * blockDim.x) {\n",
		it, it, it, n, it)
}

// flatGrid is the launch shape of a grid-stride kernel over n elements.
func flatGrid(n int64) (grid, block [3]uint32) {
	const bs = 256
	g := (n + bs - 1) / bs
	// At most 2^20 blocks, the grid-stride loop covering the rest: this keeps the
	// stride ≤ 2^28, the margin idxType relies on.
	g = max(1, min(g, 1<<20))
	return [3]uint32{uint32(g), 1, 1}, [3]uint32{bs, 1, 1}
}

// pow2 is the smallest power of two ≥ n, clamped to [lo, hi].
func pow2(n, lo, hi int64) int64 {
	p := lo
	for p < n && p < hi {
		p <<= 1
	}
	return p
}

// signature renders a kernel's parameter list.
func signature(params []Param) string {
	var ps []string
	for _, p := range params {
		// const on inputs: the compiler then refuses any kernel text that writes one.
		c := ""
		if !p.Out {
			c = "const "
		}
		ps = append(ps, fmt.Sprintf("%s%s* %s", c, p.CType, p.Name))
	}
	return strings.Join(ps, ", ")
}
