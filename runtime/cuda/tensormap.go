package cuda

import (
	"fmt"
	"unsafe"

	"github.com/lcc-dev/lcc/tensor"
)

// cuTensorMapEncodeTiled is CUDA 12.0+. It is resolved on its first call, so an older
// driver fails EncodeTiled with an ErrUnavailable error and nothing else.
var cuTensorMapEncodeTiled = libcuda.sym("cuTensorMapEncodeTiled")

// TensorMap is a CUtensorMap: the opaque 128-byte descriptor through which Hopper's
// tensor memory accelerator (TMA) copies boxes of a tensor between global and shared
// memory (cp.async.bulk.tensor). Build one with Device.EncodeTiled and pass it to
// Function.Launch by value, for a kernel parameter declared
//
//	const __grid_constant__ CUtensorMap map
//
// with CUtensorMap defined in the kernel source as
//
//	struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
//
// Launch hands the driver a 64-byte aligned copy, as CUDA requires of the C type.
type TensorMap [TensorMapSize]byte

// TensorMapSize is the size of a CUtensorMap in bytes (CU_TENSOR_MAP_NUM_QWORDS = 16).
const TensorMapSize = 128

// tensorMapAlign is the alignment CUDA requires of a CUtensorMap.
const tensorMapAlign = 64

// Swizzle is a CUtensorMapSwizzle: how the TMA permutes 16-byte chunks within each
// span of shared memory, to spread a box's rows over the banks. With SwizzleNB the
// chunk index (address bits 4 and up, within the span) is XORed with the row index
// modulo N/16 (address bits 7 and up); the pattern repeats every 8 rows of 128 bytes,
// so a swizzled box's shared-memory address should be 1024-byte aligned (Swizzle128B).
type Swizzle uint32

// The swizzle modes of Hopper (the values of CUtensorMapSwizzle in cuda.h).
const (
	SwizzleNone Swizzle = 0 // CU_TENSOR_MAP_SWIZZLE_NONE
	Swizzle32B  Swizzle = 1 // CU_TENSOR_MAP_SWIZZLE_32B
	Swizzle64B  Swizzle = 2 // CU_TENSOR_MAP_SWIZZLE_64B
	Swizzle128B Swizzle = 3 // CU_TENSOR_MAP_SWIZZLE_128B
)

// Bytes returns the span a swizzle permutes within, 0 for SwizzleNone. A box's inner
// dimension (Box[0] elements) may be at most this many bytes.
func (s Swizzle) Bytes() int {
	switch s {
	case Swizzle32B:
		return 32
	case Swizzle64B:
		return 64
	case Swizzle128B:
		return 128
	}
	return 0
}

// L2Promotion is a CUtensorMapL2promotion: the granularity at which L2 fetches the
// lines a copy touches from DRAM.
type L2Promotion uint32

// The values of CUtensorMapL2promotion in cuda.h.
const (
	L2PromoteNone L2Promotion = 0 // CU_TENSOR_MAP_L2_PROMOTION_NONE
	L2Promote64B  L2Promotion = 1 // CU_TENSOR_MAP_L2_PROMOTION_L2_64B
	L2Promote128B L2Promotion = 2 // CU_TENSOR_MAP_L2_PROMOTION_L2_128B
	L2Promote256B L2Promotion = 3 // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
)

// OOBFill is a CUtensorMapFloatOOBfill: what a load writes for the part of a box
// outside the tensor.
type OOBFill uint32

// The values of CUtensorMapFloatOOBfill in cuda.h.
const (
	OOBZero OOBFill = 0 // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros
	OOBNaN  OOBFill = 1 // CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
)

// tensorMapDType maps an lcc dtype to CUtensorMapDataType.
func tensorMapDType(t tensor.DType) (uint32, bool) {
	switch t {
	case tensor.F16:
		return 6, true // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
	case tensor.F32:
		return 7, true // CU_TENSOR_MAP_DATA_TYPE_FLOAT32
	case tensor.BF16:
		return 9, true // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
	}
	return 0, false
}

// TiledMap describes a tiled tensor map (cuTensorMapEncodeTiled): a tensor of up to
// five dimensions in global memory and the box one copy moves. Dimensions are listed
// innermost (contiguous) first, as the TMA numbers them: a row-major [rows, cols]
// matrix is Dims {cols, rows}, Strides {row pitch in bytes}, and a kernel names a box
// by its coordinates in the same order, {col, row}. Interleaved layouts
// (CU_TENSOR_MAP_INTERLEAVE_16B/32B, for NC/8HWC8 images) are not offered; the map is
// always CU_TENSOR_MAP_INTERLEAVE_NONE.
type TiledMap struct {
	DType tensor.DType // F32, BF16 or F16
	Addr  DevicePtr    // the element at coordinates 0; 16-byte aligned
	// Dims holds the size of each dimension in elements, 1 to 2^32; len(Dims) is the
	// rank, 1 to 5.
	Dims []uint64
	// Strides holds the bytes between consecutive indices of Dims[1:] (dimension 0 is
	// contiguous): len(Dims)-1 values, each a multiple of 16 below 2^40.
	Strides []uint64
	// Box holds the box's size in each dimension in elements, 1 to 256. Box[0] must
	// span a multiple of 16 bytes, and with a swizzle at most Swizzle.Bytes().
	Box []uint32
	// ElemStrides holds the step between the elements a copy takes in each
	// dimension, 1 to 8 (the TMA ignores the first); nil means every element.
	ElemStrides []uint32
	Swizzle     Swizzle
	L2Promotion L2Promotion
	OOBFill     OOBFill
}

// Validate checks m against cuTensorMapEncodeTiled's documented requirements, so a
// bad map is an error that names the field instead of the driver's bare
// CUDA_ERROR_INVALID_VALUE.
func (m TiledMap) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("cuda: tensor map: "+format, args...)
	}
	if _, ok := tensorMapDType(m.DType); !ok {
		return bad("dtype %v: want f32, bf16 or f16", m.DType)
	}
	rank := len(m.Dims)
	if rank < 1 || rank > 5 {
		return bad("rank %d (len(Dims)): want 1 to 5", rank)
	}
	if m.Addr == 0 || m.Addr%16 != 0 {
		return bad("address %#x: want a non-null address aligned to 16 bytes", uint64(m.Addr))
	}
	for i, d := range m.Dims {
		if d == 0 || d > 1<<32 {
			return bad("Dims[%d] = %d: want 1 to 2^32", i, d)
		}
	}
	if len(m.Strides) != rank-1 {
		return bad("%d strides for rank %d: want %d (dimension 0 is contiguous)",
			len(m.Strides), rank, rank-1)
	}
	for i, s := range m.Strides {
		if s%16 != 0 || s >= 1<<40 {
			return bad("Strides[%d] = %d bytes (dimension %d): want a multiple of 16 below 2^40",
				i, s, i+1)
		}
	}
	if len(m.Box) != rank {
		return bad("%d box dims for rank %d: want %d", len(m.Box), rank, rank)
	}
	for i, b := range m.Box {
		if b == 0 || b > 256 {
			return bad("Box[%d] = %d: want 1 to 256", i, b)
		}
	}
	inner := int(m.Box[0]) * m.DType.Size()
	if inner%16 != 0 {
		return bad("Box[0] = %d %v elements = %d bytes: want a multiple of 16 bytes",
			m.Box[0], m.DType, inner)
	}
	if m.ElemStrides != nil && len(m.ElemStrides) != rank {
		return bad("%d element strides for rank %d: want %d, or none", len(m.ElemStrides),
			rank, rank)
	}
	for i, e := range m.ElemStrides {
		if e == 0 || e > 8 {
			return bad("ElemStrides[%d] = %d: want 1 to 8", i, e)
		}
	}
	if m.Swizzle > Swizzle128B {
		return bad("swizzle %d: want SwizzleNone, Swizzle32B, Swizzle64B or Swizzle128B",
			m.Swizzle)
	}
	if span := m.Swizzle.Bytes(); span > 0 && inner > span {
		return bad("Box[0] = %d %v elements = %d bytes, wider than the %d-byte swizzle span",
			m.Box[0], m.DType, inner, span)
	}
	if m.L2Promotion > L2Promote256B {
		return bad("L2 promotion %d: want L2PromoteNone, 64B, 128B or 256B", m.L2Promotion)
	}
	if m.OOBFill > OOBNaN {
		return bad("out-of-bounds fill %d: want OOBZero or OOBNaN", m.OOBFill)
	}
	return nil
}

// BoxBytes returns the bytes one copy of the box writes to shared memory, the
// transaction count a kernel passes to mbarrier.arrive.expect_tx. Out-of-bounds
// elements count: they are filled, not skipped.
func (m TiledMap) BoxBytes() int {
	n := m.DType.Size()
	for i, b := range m.Box {
		e := uint32(1)
		if m.ElemStrides != nil && i > 0 { // the TMA ignores dimension 0's stride
			e = m.ElemStrides[i]
		}
		n *= int((b + e - 1) / e)
	}
	return n
}

// EncodeTiled validates m and encodes it with cuTensorMapEncodeTiled. The device
// must be of compute capability 9.0 or later; the address need not be allocated on
// d, but a kernel that uses the map must run where the address is valid.
func (d *Device) EncodeTiled(m TiledMap) (TensorMap, error) {
	if err := m.Validate(); err != nil {
		return TensorMap{}, err
	}
	if d.ccMajor < 9 {
		return TensorMap{}, fmt.Errorf("cuda: tensor map: device %d (%s) is sm_%d%d; tensor "+
			"maps need compute capability 9.0 or later", d.ordinal, d.name, d.ccMajor, d.ccMinor)
	}
	dtype, _ := tensorMapDType(m.DType)
	// Fixed-size arrays, so that no pointer is nil whatever the rank.
	var dims, strides [5]uint64
	var box, estrides [5]uint32
	copy(dims[:], m.Dims)
	copy(strides[:], m.Strides)
	copy(box[:], m.Box)
	for i := range m.Dims {
		estrides[i] = 1
		if m.ElemStrides != nil {
			estrides[i] = m.ElemStrides[i]
		}
	}
	// The driver writes the map through a 64-byte aligned pointer; Go aligns a
	// [16]uint64 to 8 only, so place it within a larger buffer.
	out := alignedTensorMap(new([TensorMapSize/8 + tensorMapAlign/8 - 1]uint64))
	const interleaveNone = 0
	err := d.do(func() error {
		return cu(cuTensorMapEncodeTiled, fmt.Sprintf("%v, dims %v, box %v, swizzle %d",
			m.DType, m.Dims, m.Box, m.Swizzle),
			uintptr(unsafe.Pointer(out)), uintptr(dtype), uintptr(len(m.Dims)), uintptr(m.Addr),
			uintptr(unsafe.Pointer(&dims[0])), uintptr(unsafe.Pointer(&strides[0])),
			uintptr(unsafe.Pointer(&box[0])), uintptr(unsafe.Pointer(&estrides[0])),
			interleaveNone, uintptr(m.Swizzle), uintptr(m.L2Promotion), uintptr(m.OOBFill))
	})
	if err != nil {
		return TensorMap{}, err
	}
	return *out, nil
}

// alignedTensorMap returns the 64-byte aligned TensorMap inside raw, which is on the
// heap, where Go never moves it.
func alignedTensorMap(raw *[TensorMapSize/8 + tensorMapAlign/8 - 1]uint64) *TensorMap {
	i := 0
	for uintptr(unsafe.Pointer(&raw[i]))%tensorMapAlign != 0 {
		i++
	}
	return (*TensorMap)(unsafe.Pointer(&raw[i]))
}
