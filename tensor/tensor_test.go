package tensor

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestDTypeNames(t *testing.T) {
	for dt := F32; dt <= Bool; dt++ {
		got, err := ParseDType(dt.String())
		if err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
		if dt.Size() == 0 {
			t.Errorf("%v has size 0", dt)
		}
		if dt.IsFloat() && dt.IsInt() {
			t.Errorf("%v is both float and int", dt)
		}
	}
	for _, s := range []string{"invalid", "float32", "", "F32"} {
		if _, err := ParseDType(s); err == nil || !strings.Contains(err.Error(), "unknown dtype") {
			t.Errorf("ParseDType(%q): err %v", s, err)
		}
	}
	if DType(200).String() != "dtype(200)" || DType(200).Size() != 0 {
		t.Errorf("out-of-range dtype: %q size %d", DType(200).String(), DType(200).Size())
	}
	if Bool.IsInt() || Bool.IsFloat() || !BF16.IsFloat() || !U8.IsInt() {
		t.Error("dtype classes")
	}
}

// Every bf16 and f16 bit pattern widens to float32 and narrows back to itself
// (NaNs stay NaN, with their sign).
func TestHalfRoundTripExhaustive(t *testing.T) {
	for b := range 1 << 16 {
		h := uint16(b)
		f := BF16ToFloat32(h)
		if got := Float32ToBF16(f); got != h && !(isNaN32(f) && isBF16NaN(got) && got>>15 == h>>15) {
			t.Fatalf("bf16 %#04x -> %g -> %#04x", h, f, got)
		}
		g := F16ToFloat32(h)
		if got := Float32ToF16(g); got != h && !(isNaN32(g) && isF16NaN(got) && got>>15 == h>>15) {
			t.Fatalf("f16 %#04x -> %g -> %#04x", h, g, got)
		}
	}
}

func isNaN32(f float32) bool  { return f != f }
func isBF16NaN(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }
func isF16NaN(h uint16) bool  { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

// nearest is the reference narrowing: among the finite values widen(h) of a
// format (sorted by bit pattern for positive h), the one nearest f, ties to the
// even pattern; beyond the largest finite value by half an ulp or more, infinity.
func nearest(f float64, widen func(uint16) float32, maxFinite, inf uint16) uint16 {
	sign := uint16(0)
	if math.Signbit(f) {
		sign, f = 0x8000, -f
	}
	lo, hi := uint16(0), maxFinite
	if f >= float64(widen(maxFinite)) {
		// the next value after the largest finite one, were the exponent wider
		ulp := float64(widen(maxFinite)) - float64(widen(maxFinite-1))
		if f-float64(widen(maxFinite)) >= ulp/2 {
			return sign | inf
		}
		return sign | maxFinite
	}
	for hi-lo > 1 { // widen(lo) <= f < widen(hi)
		mid := lo + (hi-lo)/2
		if float64(widen(mid)) <= f {
			lo = mid
		} else {
			hi = mid
		}
	}
	dl, dh := f-float64(widen(lo)), float64(widen(hi))-f
	switch {
	case dl < dh:
		return sign | lo
	case dh < dl:
		return sign | hi
	case lo&1 == 0:
		return sign | lo
	}
	return sign | hi
}

// Narrowing rounds to nearest, ties to even, against the reference on random
// float32 values across both formats' ranges (normal, subnormal, overflow).
func TestHalfRounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		// Random bits, with the exponent steered into the interesting range.
		bits := r.Uint32()
		f := math.Float32frombits(bits)
		if i%2 == 0 {
			f = float32(math.Ldexp(r.Float64()*2-1, r.IntN(44)-26))
		}
		if isNaN32(f) || math.IsInf(float64(f), 0) {
			continue
		}
		if got, want := Float32ToF16(f), nearest(float64(f), F16ToFloat32, 0x7bff, 0x7c00); got != want {
			t.Fatalf("Float32ToF16(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
		if got, want := Float32ToBF16(f), nearest(float64(f), BF16ToFloat32, 0x7f7f, 0x7f80); got != want {
			t.Fatalf("Float32ToBF16(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

// Named cases of the rounding rules.
func TestHalfRoundingCases(t *testing.T) {
	for _, c := range []struct {
		name string
		f    float32
		bf16 uint16
		f16  uint16
	}{
		{"one", 1, 0x3f80, 0x3c00},
		{"minus zero", float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		// 1 + 2⁻⁸ is halfway between bf16 1 and 1 + 2⁻⁷: ties to even (1).
		{"bf16 tie down", 1 + 1.0/256, 0x3f80, 0x3c04},
		// 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ and 1 + 2⁻⁶: ties to even (up).
		{"bf16 tie up", 1 + 3.0/256, 0x3f82, 0x3c0c},
		// 1 + 2⁻¹¹ is halfway between f16 1 and 1 + 2⁻¹⁰: ties to even (1).
		{"f16 tie down", 1 + 1.0/2048, 0x3f80, 0x3c00},
		{"f16 tie up", 1 + 3.0/2048, 0x3f80, 0x3c02},
		{"f16 max", 65504, 0x4780, 0x7bff},
		{"f16 overflow", 65520, 0x4780, 0x7c00},
		{"f16 below overflow", 65519, 0x4780, 0x7bff},
		{"f16 smallest subnormal", float32(math.Ldexp(1, -24)), 0x3380, 0x0001},
		// 2⁻²⁵ is halfway between 0 and the smallest subnormal: ties to even (0).
		{"f16 underflow tie", float32(math.Ldexp(1, -25)), 0x3300, 0x0000},
		{"f16 above underflow tie", float32(math.Ldexp(1.0001, -25)), 0x3300, 0x0001},
		{"bf16 overflow", math.MaxFloat32, 0x7f80, 0x7c00},
		{"inf", float32(math.Inf(1)), 0x7f80, 0x7c00},
		{"-inf", float32(math.Inf(-1)), 0xff80, 0xfc00},
	} {
		if got := Float32ToBF16(c.f); got != c.bf16 {
			t.Errorf("%s: Float32ToBF16(%g) = %#04x, want %#04x", c.name, c.f, got, c.bf16)
		}
		if got := Float32ToF16(c.f); got != c.f16 {
			t.Errorf("%s: Float32ToF16(%g) = %#04x, want %#04x", c.name, c.f, got, c.f16)
		}
	}
	// NaN narrows to a quiet NaN and widens back to NaN.
	nan := float32(math.NaN())
	if b := Float32ToBF16(nan); !isBF16NaN(b) || b&0x40 == 0 || !isNaN32(BF16ToFloat32(b)) {
		t.Errorf("bf16 NaN: %#04x", b)
	}
	// A signalling NaN whose payload sits in the low bits must not round to Inf.
	if b := Float32ToBF16(math.Float32frombits(0x7f800001)); !isBF16NaN(b) {
		t.Errorf("bf16 of a low-payload NaN: %#04x", b)
	}
	if h := Float32ToF16(nan); !isF16NaN(h) || !isNaN32(F16ToFloat32(h)) {
		t.Errorf("f16 NaN: %#04x", h)
	}
}

func TestRoundTo(t *testing.T) {
	x := FromFloats(F64, []int64{5}, []float64{1 + 1e-12, 1 + 1.0/512, 70000, math.NaN(), math.Inf(-1)})
	f32 := x.Clone()
	f32.RoundTo(F32)
	if f32.F[0] != 1 || f32.F[2] != 70000 {
		t.Errorf("f32 rounding %v", f32.F)
	}
	bf := x.Clone()
	bf.RoundTo(BF16)
	if bf.F[1] != 1 || bf.F[2] != 70144 || !math.IsNaN(bf.F[3]) || !math.IsInf(bf.F[4], -1) {
		t.Errorf("bf16 rounding %v", bf.F)
	}
	h := x.Clone()
	h.RoundTo(F16)
	if h.F[1] != 1+1.0/512 || !math.IsInf(h.F[2], 1) || !math.IsNaN(h.F[3]) {
		t.Errorf("f16 rounding %v", h.F)
	}
	same := x.Clone()
	same.RoundTo(F64)
	if !Equal(same, x) {
		t.Error("RoundTo(F64) changed the tensor")
	}
	// FromFloats and Scalar round to their dtype.
	if s := Scalar(BF16, 1+1.0/256); s.F[0] != 1 {
		t.Errorf("Scalar(bf16) = %v", s.F[0])
	}
	if s := Scalar(I32, 7.9); s.I[0] != 7 || s.F != nil || len(s.Shape) != 0 {
		t.Errorf("Scalar(i32) = %+v", s)
	}
}

// Every dtype encodes little-endian and decodes back to the same tensor.
func TestEncodeDecode(t *testing.T) {
	floats := []float64{0, -1.5, 3.25, math.Inf(1), math.NaN(), 1e-3}
	ints := []int64{0, -1, 127, -128, 255, 1 << 40}
	for dt := F32; dt <= Bool; dt++ {
		var x *Tensor
		if dt.IsFloat() {
			x = FromFloats(dt, []int64{2, 3}, floats)
		} else {
			vals := make([]int64, len(ints))
			for i, v := range ints {
				vals[i] = WrapInt(v, dt)
			}
			x = FromInts(dt, []int64{2, 3}, vals)
		}
		raw := x.Encode()
		if int64(len(raw)) != x.Bytes() {
			t.Errorf("%v: %d bytes, Bytes() %d", dt, len(raw), x.Bytes())
		}
		y, err := Decode(dt, []int64{2, 3}, raw)
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if !Equal(x, y) {
			t.Errorf("%v: decoded %v %v, want %v %v", dt, y.F, y.I, x.F, x.I)
		}
	}
	// Fixed byte layouts: f32 1.0, i32 −2, bf16 1.0.
	if got := FromFloats(F32, []int64{1}, []float64{1}).Encode(); !slices.Equal(got, []byte{0, 0, 0x80, 0x3f}) {
		t.Errorf("f32 1.0 encodes as % x", got)
	}
	if got := FromInts(I32, []int64{1}, []int64{-2}).Encode(); !slices.Equal(got, []byte{0xfe, 0xff, 0xff, 0xff}) {
		t.Errorf("i32 -2 encodes as % x", got)
	}
	if got := FromFloats(BF16, []int64{1}, []float64{1}).Encode(); !slices.Equal(got, []byte{0x80, 0x3f}) {
		t.Errorf("bf16 1.0 encodes as % x", got)
	}
	// Any nonzero byte decodes to a true bool.
	if b, _ := Decode(Bool, []int64{3}, []byte{0, 2, 255}); !slices.Equal(b.I, []int64{0, 1, 1}) {
		t.Errorf("bools %v", b.I)
	}
}

// TestChunks: a tensor encoded and decoded a few elements at a time
// (EncodeAt, DecodeAt: what loads and uploads stream through) has the bytes
// and elements of Encode and Decode, for every dtype.
func TestChunks(t *testing.T) {
	floats := []float64{0, -1.5, 3.25, math.Inf(1), math.NaN(), 1e-3, 7, -0.125}
	ints := []int64{0, -1, 127, -128, 255, 1 << 40, 3, 1}
	for dt := F32; dt <= Bool; dt++ {
		var x *Tensor
		if dt.IsFloat() {
			x = FromFloats(dt, []int64{8}, floats)
		} else {
			vals := make([]int64, len(ints))
			for i, v := range ints {
				vals[i] = WrapInt(v, dt)
			}
			x = FromInts(dt, []int64{8}, vals)
		}
		whole := x.Encode()
		size := int64(dt.Size())
		y := New(dt, 8)
		got := make([]byte, len(whole))
		for i := int64(0); i < 8; i += 3 { // chunks of 3, 3 and 2 elements
			n := min(3, 8-i)
			x.EncodeAt(got[i*size:(i+n)*size], i)
			y.DecodeAt(i, whole[i*size:(i+n)*size])
		}
		if !slices.Equal(got, whole) || !Equal(x, y) {
			t.Errorf("%v: chunks encode % x (want % x), decode %v %v", dt, got, whole, y.F, y.I)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		dt    DType
		shape []int64
		raw   []byte
		want  string
	}{
		{F32, []int64{2}, make([]byte, 7), "f32[2] needs 8 bytes, found 7"},
		{Invalid, []int64{1}, nil, "cannot decode dtype invalid"},
		{F32, []int64{-1}, nil, "negative dimension -1"},
		{U8, []int64{1 << 20, 1 << 20, 1 << 20}, nil, "more than 4294967296 elements"},
	} {
		if _, err := Decode(c.dt, c.shape, c.raw); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%v, %v): %v, want %q", c.dt, c.shape, err, c.want)
		}
	}
}

func TestShapes(t *testing.T) {
	if n, err := Numel([]int64{2, 3, 4}); n != 24 || err != nil {
		t.Errorf("Numel = %d, %v", n, err)
	}
	if n, err := Numel(nil); n != 1 || err != nil {
		t.Errorf("Numel of a scalar = %d, %v", n, err)
	}
	if n, err := Numel([]int64{0, -1}); err == nil {
		t.Errorf("Numel with a negative dim after a zero = %d", n)
	}
	if _, err := NumelAtMost([]int64{10, 10}, 99); err == nil || !strings.Contains(err.Error(), "more than 99") {
		t.Errorf("NumelAtMost: %v", err)
	}
	if n, err := NumelAtMost([]int64{10, 10}, 100); n != 100 || err != nil {
		t.Errorf("NumelAtMost at the limit: %d, %v", n, err)
	}
	if Elements[int]([]int64{2, 3}) != 6 || Elements[int64](nil) != 1 {
		t.Error("Elements")
	}
	if got := Strides[int64]([]int64{2, 3, 4}); !slices.Equal(got, []int64{12, 4, 1}) {
		t.Errorf("Strides = %v", got)
	}
	if got := Strides[int](nil); len(got) != 0 {
		t.Errorf("Strides of a scalar = %v", got)
	}
	// [3,1] viewed as [2,3,4]: the leading dim and the size-1 dim broadcast.
	if got := BroadcastStrides[int]([]int64{3, 1}, []int64{2, 3, 4}); !slices.Equal(got, []int{0, 1, 0}) {
		t.Errorf("BroadcastStrides = %v", got)
	}
	if got := ShapeString([]int64{2, 16, 64}); got != "[2,16,64]" {
		t.Errorf("ShapeString = %q", got)
	}
	if got := ShapeString(nil); got != "[]" {
		t.Errorf("ShapeString of a scalar = %q", got)
	}
}

func TestWrapInt(t *testing.T) {
	for _, c := range []struct {
		v    int64
		dt   DType
		want int64
	}{
		{1 << 31, I32, -1 << 31}, {-129, I8, 127}, {256 + 7, U8, 7}, {-1, U8, 255},
		{5, Bool, 1}, {0, Bool, 0}, {1 << 40, I64, 1 << 40},
	} {
		if got := WrapInt(c.v, c.dt); got != c.want {
			t.Errorf("WrapInt(%d, %v) = %d, want %d", c.v, c.dt, got, c.want)
		}
	}
}

func TestTensorBasics(t *testing.T) {
	x := FromInts(I64, []int64{2, 2}, []int64{1, 2, 3, 4})
	c := x.Clone()
	c.I[0], c.Shape[0] = 9, 7
	if x.I[0] != 1 || x.Shape[0] != 2 {
		t.Error("Clone shares storage")
	}
	if x.Numel() != 4 || x.Bytes() != 32 || x.Float(3) != 4 || x.Int(2) != 3 {
		t.Errorf("accessors: numel %d bytes %d", x.Numel(), x.Bytes())
	}
	f := FromFloats(F32, []int64{3}, []float64{1.9, -1.9, 2})
	if !slices.Equal(f.Ints(), []int64{1, -1, 2}) || f.Int(0) != 1 {
		t.Errorf("Ints of floats truncate: %v", f.Ints())
	}
	n := New(BF16, 2, 0)
	if n.Numel() != 0 || n.F == nil || n.I != nil {
		t.Errorf("empty bf16 tensor %+v", n)
	}
	// Equal: NaNs are equal, shapes and dtypes must match.
	a := FromFloats(F32, []int64{2}, []float64{math.NaN(), 1})
	if !Equal(a, a.Clone()) {
		t.Error("NaN tensors differ")
	}
	if Equal(a, FromFloats(F64, []int64{2}, []float64{math.NaN(), 1})) ||
		Equal(a, FromFloats(F32, []int64{2, 1}, []float64{math.NaN(), 1})) ||
		Equal(a, FromFloats(F32, []int64{2}, []float64{0, 1})) {
		t.Error("Equal ignores a difference")
	}
}

// Programming errors panic with lcc's BUG prefix; sizes from files go through
// Numel first and never reach them.
func TestConstructorPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"New negative":     func() { New(F32, -1) },
		"New huge":         func() { New(U8, 1<<33) },
		"FromFloats count": func() { FromFloats(F32, []int64{3}, []float64{1}) },
		"FromInts count":   func() { FromInts(I64, []int64{1}, []int64{1, 2}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "lcc: BUG: ") {
					t.Errorf("%s: recovered %v", name, r)
				}
			}()
			f()
		}()
	}
}

func TestConvert(t *testing.T) {
	f := &Tensor{DType: F32, Shape: []int64{3}, F: []float64{1.5, -2.25, 1.0009765625}}
	if f.Convert(F32) != f {
		t.Error("Convert to the same dtype copied")
	}
	b := f.Convert(BF16)
	if b == f || b.DType != BF16 || b.F[0] != 1.5 || b.F[1] != -2.25 || b.F[2] != 1 {
		t.Errorf("Convert(BF16) = %v %v, want rounded [1.5 -2.25 1]", b.DType, b.F)
	}
	i := f.Convert(I64)
	if i.DType != I64 || i.I[0] != 1 || i.I[1] != -2 {
		t.Errorf("Convert(I64) = %v", i.I)
	}
}

// TestSplitAxis: a shape splits into the dims before an axis, the axis and the
// dims after it, whose product is the shape's.
func TestSplitAxis(t *testing.T) {
	for _, c := range []struct {
		shape              []int64
		axis               int
		outer, size, inner int
	}{{[]int64{2, 3, 4}, 0, 1, 2, 12}, {[]int64{2, 3, 4}, 1, 2, 3, 4}, {[]int64{2, 3, 4}, 2, 6, 4, 1},
		{[]int64{5}, 0, 1, 5, 1}} {
		o, s, i := SplitAxis(c.shape, c.axis)
		if o != c.outer || s != c.size || i != c.inner {
			t.Errorf("SplitAxis(%v, %d) = %d, %d, %d; want %d, %d, %d", c.shape, c.axis, o, s, i,
				c.outer, c.size, c.inner)
		}
	}
}
