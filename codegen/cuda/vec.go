package cuda

import "github.com/lcc-dev/lcc/tensor"

// vecHelpers are 16-byte loads and stores of f32 (4 lanes) and bf16 (8 lanes),
// converted to and from fp32 registers, part of the prelude; a caller guarantees 16-byte alignment (arena buffers are 256-aligned, so a
// row length that is a multiple of the lane count suffices).
const vecHelpers = `#ifndef LCC_VEC16
#define LCC_VEC16
__device__ __forceinline__ void lcc_ld16(const float* p, float* o) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
}
__device__ __forceinline__ void lcc_st16(float* p, const float* o) {
  *reinterpret_cast<float4*>(p) = make_float4(o[0], o[1], o[2], o[3]);
}
__device__ __forceinline__ void lcc_ld16(const lcc_bf16* p, float* o) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    o[2 * k] = __uint_as_float(w[k] << 16);
    o[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void lcc_st16(lcc_bf16* p, const float* o) {
  unsigned w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = (unsigned)lcc_bf16_of(o[2 * k]).x | ((unsigned)lcc_bf16_of(o[2 * k + 1]).x << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}
#endif
`

// vecLanes is the number of elements of dt in one 16-byte vector access, or 1
// when the kernels have no vector form for dt or a row of n elements would leave
// vectors unaligned.
func vecLanes(dt tensor.DType, n int64) int64 {
	var l int64
	switch dt {
	// Only f32 and bf16 have lcc_ld16/lcc_st16 overloads; f16 and integers go scalar.
	case tensor.F32:
		l = 4
	case tensor.BF16:
		l = 8
	default:
		return 1
	}
	// A row that is not whole vectors would put the next row's first vector off a
	// 16-byte boundary.
	if n%l != 0 {
		return 1
	}
	return l
}
