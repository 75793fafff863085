// Package tensor holds lcc's host-side tensor: a dtype, a shape and its elements.
//
// Invariants:
//   - Floating-point dtypes (f32, f16, bf16, f64) keep their elements in F as float64;
//     a tensor of dtype f32 holds only values exactly representable in float32 once
//     RoundTo has been applied, which the CPU interpreter does after every op.
//   - Integer dtypes and bool keep their elements in I (bool as 0 or 1).
//   - len(F) or len(I) equals the product of Shape; the other slice is nil.
//
// One storage type per kind keeps every CPU kernel to a single code path; lcc's CPU
// runtime is a reference, not the fast path (that is the CUDA backend).
package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// DType is an element type.
type DType uint8

// The element types lcc knows. The order is part of no file format.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	F64
	I64
	I32
	I8
	U8
	Bool
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "f32", F16: "f16", BF16: "bf16",
	F64: "f64", I64: "i64", I32: "i32", I8: "i8", U8: "u8", Bool: "bool"}

var dtypeSizes = [...]int{Invalid: 0, F32: 4, F16: 2, BF16: 2, F64: 8, I64: 8, I32: 4,
	I8: 1, U8: 1, Bool: 1}

// String returns the short name used in the text IR ("f32", "i64", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element in memory and in files.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// IsFloat reports whether d is a floating-point type (its elements live in F).
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// IsInt reports whether d is an integer type (bool is not).
func (d DType) IsInt() bool { return d == I64 || d == I32 || d == I8 || d == U8 }

// ParseDType is the inverse of String.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if n == s && i != int(Invalid) {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of f32, f16, bf16, f64, i64, i32, i8, u8, bool)", s)
}

// MaxElements bounds any tensor lcc allocates on the host from untrusted sizes
// (4 Gi elements). Larger tensors exist only on GPUs, planned, never materialised here.
const MaxElements = 1 << 32

// Numel returns the number of elements of shape, or an error if a dim is negative
// or the product overflows MaxElements. Call it before allocating from a file's sizes.
func Numel(shape []int64) (int64, error) { return NumelAtMost(shape, MaxElements) }

// NumelAtMost returns the number of elements of shape, or an error if a dim is
// negative or the product exceeds limit.
func NumelAtMost(shape []int64, limit int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %s", d, Brief(shape))
		}
		if d != 0 && n > limit/d {
			return 0, fmt.Errorf("shape %s has more than %d elements", Brief(shape), limit)
		}
		n *= d
	}
	return n, nil
}

// WrapInt wraps v to the width of integer dtype dt as a store of that dtype does
// (two's complement); bools become 0 or 1. The CPU interpreter and the CUDA
// literals both use it, so integer overflow reads the same on either device.
func WrapInt(v int64, dt DType) int64 {
	switch dt {
	case I32:
		return int64(int32(v))
	case I8:
		return int64(int8(v))
	case U8:
		return int64(uint8(v))
	case Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

// Tensor is a dense row-major host tensor.
type Tensor struct {
	DType DType
	Shape []int64
	F     []float64 // elements of a floating-point tensor
	I     []int64   // elements of an integer or bool tensor
}

// New returns a zero tensor. It panics if shape is invalid: callers holding
// untrusted sizes check them with Numel first.
func New(dt DType, shape ...int64) *Tensor {
	n, err := Numel(shape)
	if err != nil {
		panic("lcc: BUG: tensor.New: " + err.Error())
	}
	t := &Tensor{DType: dt, Shape: append([]int64{}, shape...)}
	if dt.IsFloat() {
		t.F = make([]float64, n)
	} else {
		t.I = make([]int64, n)
	}
	return t
}

// FromFloats returns a floating tensor holding a copy of data.
func FromFloats(dt DType, shape []int64, data []float64) *Tensor {
	t := New(dt, shape...)
	if len(data) != len(t.F) {
		panic(fmt.Sprintf("lcc: BUG: tensor.FromFloats: %d values for shape %v", len(data), shape))
	}
	copy(t.F, data)
	t.RoundTo(dt)
	return t
}

// FromInts returns an integer or bool tensor holding a copy of data.
func FromInts(dt DType, shape []int64, data []int64) *Tensor {
	t := New(dt, shape...)
	if len(data) != len(t.I) {
		panic(fmt.Sprintf("lcc: BUG: tensor.FromInts: %d values for shape %v", len(data), shape))
	}
	copy(t.I, data)
	return t
}

// Scalar returns a rank-0 tensor.
func Scalar(dt DType, v float64) *Tensor {
	t := New(dt)
	if dt.IsFloat() {
		t.F[0] = v
		t.RoundTo(dt)
	} else {
		t.I[0] = int64(v)
	}
	return t
}

// Numel is the number of elements.
func (t *Tensor) Numel() int {
	if t.DType.IsFloat() {
		return len(t.F)
	}
	return len(t.I)
}

// Bytes is the size of the tensor's elements in its dtype.
func (t *Tensor) Bytes() int64 { return int64(t.Numel()) * int64(t.DType.Size()) }

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	c := &Tensor{DType: t.DType, Shape: append([]int64{}, t.Shape...)}
	if t.F != nil {
		c.F = append([]float64{}, t.F...)
	}
	if t.I != nil {
		c.I = append([]int64{}, t.I...)
	}
	return c
}

// Float returns element i as a float64 whatever the dtype.
func (t *Tensor) Float(i int) float64 {
	if t.DType.IsFloat() {
		return t.F[i]
	}
	return float64(t.I[i])
}

// Int returns element i as an int64 whatever the dtype (floats truncate).
func (t *Tensor) Int(i int) int64 {
	if t.DType.IsFloat() {
		return int64(t.F[i])
	}
	return t.I[i]
}

// Ints returns the elements as int64s (a copy).
func (t *Tensor) Ints() []int64 {
	out := make([]int64, t.Numel())
	for i := range out {
		out[i] = t.Int(i)
	}
	return out
}

// Convert returns t's values in dtype dt, rounded as dt stores them: t itself
// when it already has dtype dt, else a copy.
func (t *Tensor) Convert(dt DType) *Tensor {
	if t.DType == dt {
		return t
	}
	out := New(dt, t.Shape...)
	for i := 0; i < t.Numel(); i++ {
		if dt.IsFloat() {
			out.F[i] = t.Float(i)
		} else {
			out.I[i] = t.Int(i)
		}
	}
	out.RoundTo(dt)
	return out
}

// RoundTo rounds every element to the precision of dt (f32, f16, bf16); f64 and
// integer tensors are unchanged.
func (t *Tensor) RoundTo(dt DType) {
	switch dt {
	case F32:
		for i, v := range t.F {
			t.F[i] = float64(float32(v))
		}
	case BF16:
		for i, v := range t.F {
			t.F[i] = float64(BF16ToFloat32(Float32ToBF16(float32(v))))
		}
	case F16:
		for i, v := range t.F {
			t.F[i] = float64(F16ToFloat32(Float32ToF16(float32(v))))
		}
	}
}

// Equal reports whether a and b have the same dtype, shape and elements (NaNs equal).
func Equal(a, b *Tensor) bool {
	if a.DType != b.DType || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	for i := range a.F {
		if a.F[i] != b.F[i] && !(math.IsNaN(a.F[i]) && math.IsNaN(b.F[i])) {
			return false
		}
	}
	for i := range a.I {
		if a.I[i] != b.I[i] {
			return false
		}
	}
	return len(a.F) == len(b.F) && len(a.I) == len(b.I)
}

// SplitAxis views shape as [outer, shape[axis], inner]: the products of the
// dims before and after axis. Kernels that work along one axis (collectives'
// blocks, concat, softmax, a sharded feed's rows) index a row-major tensor as
// (o*size + i)*inner + k with it.
func SplitAxis(shape []int64, axis int) (outer, size, inner int) {
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= int(d)
		case i > axis:
			inner *= int(d)
		}
	}
	return outer, int(shape[axis]), inner
}

// ShapeString formats a shape as "[2,16,64]".
func ShapeString(shape []int64) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, d)
	}
	sb.WriteByte(']')
	return sb.String()
}

// Decode reads little-endian elements of dtype dt and shape from raw. raw must hold
// exactly numel × dt.Size() bytes; the caller bounds shape first with Numel.
func Decode(dt DType, shape []int64, raw []byte) (*Tensor, error) {
	n, err := Numel(shape)
	if err != nil {
		return nil, err
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("cannot decode dtype %v", dt)
	}
	if want := n * int64(dt.Size()); int64(len(raw)) != want {
		return nil, fmt.Errorf("%v%s needs %d bytes, found %d", dt, ShapeString(shape), want, len(raw))
	}
	t := New(dt, shape...)
	t.DecodeAt(0, raw)
	return t, nil
}

// DecodeAt sets the elements of t from element i on to raw, little-endian
// elements of t's dtype, as Decode reads them: a loader decodes a large tensor
// from a file a bounded chunk at a time instead of holding all its bytes beside
// it. It panics if raw is not whole elements or runs past t's end (callers size
// the chunks from t).
func (t *Tensor) DecodeAt(i int64, raw []byte) {
	dt := t.DType
	size := int64(dt.Size())
	if size == 0 || int64(len(raw))%size != 0 || i < 0 || i+int64(len(raw))/size > int64(t.Numel()) {
		panic(fmt.Sprintf("lcc: BUG: tensor.DecodeAt: %d bytes at element %d of %v%s", len(raw), i, dt,
			ShapeString(t.Shape)))
	}
	le := binary.LittleEndian
	n := int64(len(raw)) / size
	f, in := t.F, t.I
	if dt.IsFloat() {
		f = f[i : i+n]
	} else {
		in = in[i : i+n]
	}
	for i := int64(0); i < n; i++ {
		switch dt {
		case F32:
			f[i] = float64(math.Float32frombits(le.Uint32(raw[4*i:])))
		case F64:
			f[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		case F16:
			f[i] = float64(F16ToFloat32(le.Uint16(raw[2*i:])))
		case BF16:
			f[i] = float64(BF16ToFloat32(le.Uint16(raw[2*i:])))
		case I64:
			in[i] = int64(le.Uint64(raw[8*i:]))
		case I32:
			in[i] = int64(int32(le.Uint32(raw[4*i:])))
		case I8:
			in[i] = int64(int8(raw[i]))
		case U8:
			in[i] = int64(raw[i])
		case Bool:
			if raw[i] != 0 {
				in[i] = 1
			}
		}
	}
}

// Encode writes the elements little-endian in the tensor's dtype.
func (t *Tensor) Encode() []byte {
	out := make([]byte, t.Numel()*t.DType.Size())
	t.EncodeAt(out, 0)
	return out
}

// EncodeAt writes the elements of t from element i on into out, as many as
// out holds, as Encode writes them: an upload encodes a large tensor a bounded
// chunk at a time instead of beside it whole. It panics if out is not whole
// elements or runs past t's end.
func (t *Tensor) EncodeAt(out []byte, i int64) {
	if len(out) == 0 {
		return
	}
	size := int64(t.DType.Size())
	if size == 0 || int64(len(out))%size != 0 || i < 0 || i+int64(len(out))/size > int64(t.Numel()) {
		panic(fmt.Sprintf("lcc: BUG: tensor.EncodeAt: %d bytes at element %d of %v%s", len(out), i, t.DType,
			ShapeString(t.Shape)))
	}
	n := int64(len(out)) / size
	f, in := t.F, t.I
	if t.DType.IsFloat() {
		f = f[i : i+n]
	} else {
		in = in[i : i+n]
	}
	le := binary.LittleEndian
	for i := int64(0); i < n; i++ {
		switch t.DType {
		case F32:
			le.PutUint32(out[4*i:], math.Float32bits(float32(f[i])))
		case F64:
			le.PutUint64(out[8*i:], math.Float64bits(f[i]))
		case F16:
			le.PutUint16(out[2*i:], Float32ToF16(float32(f[i])))
		case BF16:
			le.PutUint16(out[2*i:], Float32ToBF16(float32(f[i])))
		case I64:
			le.PutUint64(out[8*i:], uint64(in[i]))
		case I32:
			le.PutUint32(out[4*i:], uint32(int32(in[i])))
		case I8, U8, Bool:
			out[i] = byte(in[i])
		}
	}
}

// BF16ToFloat32 widens a bfloat16 bit pattern.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 narrows with round-to-nearest-even, keeping NaNs quiet.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToFloat32 widens an IEEE half bit pattern.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(mant) / 1024 / 16384
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float32ToF16 narrows with round-to-nearest-even.
func Float32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23&0xff) - 127 + 15
	mant := u & 0x7fffff
	switch {
	case u&0x7fffffff > 0x7f800000:
		return sign | 0x7e00
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}
