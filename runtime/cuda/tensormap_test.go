package cuda

import (
	"bytes"
	"errors"
	"github.com/lcc-dev/lcc/internal/gputest"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/lcc-dev/lcc/tensor"
)

// tmaBoxSrc loads one 32×64 bf16 box of a row-major matrix into shared memory with
// one TMA copy (128-byte swizzle), completed through an mbarrier, and writes the box
// to out row-major, undoing the swizzle by its formula. The box's rows are 128 bytes,
// the swizzle's span, so the 16-byte chunk c of box row r lands at chunk c ^ (r % 8).
// Sources have no includes, as lcc's kernels do not.
const tmaBoxSrc = `
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

#define BOX_COLS 64
#define BOX_ROWS 32
#define BOX_BYTES (BOX_ROWS * BOX_COLS * 2)

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned r;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// Launch with BOX_BYTES + 1024 bytes of dynamic shared memory: the 128-byte swizzle
// repeats every 1024 bytes, so the box must start on a 1024-byte boundary.
extern "C" __global__ void __launch_bounds__(128) tma_box(
    const __grid_constant__ CUtensorMap map, int c0, int r0, unsigned short* out) {
  extern __shared__ __align__(128) unsigned char sh[];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned base = smem_addr(sh);
  const unsigned box = (base + 1023u) & ~1023u;
  const unsigned char* boxp = sh + (box - base);
  const unsigned b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    // Make the initialised barrier visible to the TMA, which is the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(b), "r"(BOX_BYTES) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        :: "r"(box), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(r0), "r"(b)
        : "memory");
  }
  // Every thread waits for phase 0 to complete: one arrival and BOX_BYTES bytes.
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" :: "r"(b) : "memory");
  for (int i = threadIdx.x; i < BOX_ROWS * BOX_COLS; i += blockDim.x) {
    const unsigned off = (i / BOX_COLS) * 128u + (i % BOX_COLS) * 2u;
    const unsigned swz = off ^ (((off >> 7) & 7u) << 4);
    out[i] = *reinterpret_cast<const unsigned short*>(boxp + swz);
  }
}
`

// tmaBox is the box tmaBoxSrc loads: columns (innermost) by rows.
const tmaBoxCols, tmaBoxRows = 64, 32

// needSM90aNVRTC returns an NVRTC that compiles sm_90a or skips the test, saying why.
func needSM90aNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	n, err := NVRTCFor("sm_90a")
	if errors.Is(err, ErrUnavailable) {
		gputest.Skipf(t, "skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCompileTMA compiles the TMA kernel for sm_90a with an NVRTC of 12.0 or later,
// beside the default NVRTC in the same process (11.8 in CI, through LCC_NVRTC12).
func TestCompileTMA(t *testing.T) {
	n := needSM90aNVRTC(t)
	v, _ := n.Version()
	t.Logf("NVRTC %s from %s", v, n.Path())
	for _, s := range n.symbols() {
		if _, err := s.resolve(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
	ptx, log, err := n.Compile(tmaBoxSrc, "tma_box.cu", "sm_90a", nil)
	if err != nil {
		t.Fatalf("Compile: %v\nlog:\n%s", err, log)
	}
	for _, want := range []string{".target sm_90a", ".entry tma_box", "cp.async.bulk.tensor.2d",
		"mbarrier.try_wait.parity", ".param .align 64 .b8 tma_box_param_0[128]"} {
		if !bytes.Contains(ptx, []byte(want)) {
			t.Errorf("PTX lacks %q", want)
		}
	}
	cubin, log, err := n.CompileCUBIN(tmaBoxSrc, "tma_box.cu", "sm_90a", nil)
	if err != nil || !bytes.HasPrefix(cubin, []byte("\x7fELF")) {
		t.Fatalf("CompileCUBIN: %v\nlog:\n%s", err, log)
	}
	// The default NVRTC still compiles in the same process.
	if _, _, err := Compile(saxpySrc, "saxpy.cu", "compute_80", nil); err != nil &&
		!errors.Is(err, ErrUnavailable) {
		t.Errorf("default NVRTC beside the sm_90a one: %v", err)
	}
}

// TestNVRTCForDefault: an architecture without a minimum version gets the default
// NVRTC, and sm_90a gets one of 12.0 or later or an error that says what to set.
func TestNVRTCForDefault(t *testing.T) {
	v := needNVRTC(t)
	n, err := NVRTCFor("compute_80")
	if err != nil || n != defaultNVRTC {
		t.Errorf("NVRTCFor(compute_80) = %p, %v; want the default NVRTC", n, err)
	}
	n, err = NVRTCFor("sm_90a")
	switch {
	case err == nil:
		if nv, _ := n.Version(); nv < "12" {
			t.Errorf("NVRTCFor(sm_90a) gave NVRTC %s", nv)
		}
	case errors.Is(err, ErrUnavailable):
		if v >= "12" || !strings.Contains(err.Error(), EnvNVRTC12) {
			t.Errorf("default NVRTC %s: NVRTCFor(sm_90a) = %v", v, err)
		}
	default:
		t.Logf("%s is set but unusable: %v", EnvNVRTC12, err)
	}
}

// goodMap is a valid 2-D bf16 map with a 128-byte swizzle.
func goodMap() TiledMap {
	return TiledMap{DType: tensor.BF16, Addr: 0x7f0000000000, Dims: []uint64{200, 100},
		Strides: []uint64{416}, Box: []uint32{64, 32}, Swizzle: Swizzle128B}
}

// TestTiledMapValidate checks that every documented requirement of
// cuTensorMapEncodeTiled is an error naming the field, without a GPU.
func TestTiledMapValidate(t *testing.T) {
	if err := goodMap().Validate(); err != nil {
		t.Fatalf("valid map refused: %v", err)
	}
	for _, c := range []struct {
		edit func(*TiledMap)
		want string
	}{
		{func(m *TiledMap) { m.DType = tensor.F64 }, "dtype f64"},
		{func(m *TiledMap) { m.Dims, m.Strides, m.Box = nil, nil, nil }, "rank 0"},
		{func(m *TiledMap) {
			m.Dims, m.Strides, m.Box = make([]uint64, 6), make([]uint64, 5), make([]uint32, 6)
		}, "rank 6"},
		{func(m *TiledMap) { m.Addr += 8 }, "aligned to 16 bytes"},
		{func(m *TiledMap) { m.Addr = 0 }, "non-null"},
		{func(m *TiledMap) { m.Dims[1] = 0 }, "Dims[1] = 0"},
		{func(m *TiledMap) { m.Dims[0] = 1<<32 + 1 }, "Dims[0] = 4294967297"},
		{func(m *TiledMap) { m.Strides = nil }, "0 strides for rank 2"},
		{func(m *TiledMap) { m.Strides[0] = 400 + 8 }, "Strides[0] = 408 bytes"},
		{func(m *TiledMap) { m.Strides[0] = 1 << 40 }, "below 2^40"},
		{func(m *TiledMap) { m.Box = m.Box[:1] }, "1 box dims for rank 2"},
		{func(m *TiledMap) { m.Box[1] = 257 }, "Box[1] = 257"},
		{func(m *TiledMap) { m.Box[1] = 0 }, "Box[1] = 0"},
		{func(m *TiledMap) { m.Box[0] = 12 }, "24 bytes: want a multiple of 16"},
		{func(m *TiledMap) { m.Box[0] = 128 }, "256 bytes, wider than the 128-byte swizzle"},
		{func(m *TiledMap) { m.Swizzle = Swizzle64B }, "wider than the 64-byte swizzle"},
		{func(m *TiledMap) { m.Swizzle = 4 }, "swizzle 4"},
		{func(m *TiledMap) { m.ElemStrides = []uint32{1} }, "1 element strides for rank 2"},
		{func(m *TiledMap) { m.ElemStrides = []uint32{1, 9} }, "ElemStrides[1] = 9"},
		{func(m *TiledMap) { m.L2Promotion = 4 }, "L2 promotion 4"},
		{func(m *TiledMap) { m.OOBFill = 2 }, "out-of-bounds fill 2"},
	} {
		m := goodMap()
		c.edit(&m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, c.want)
		}
	}
}

func TestTiledMapBoxBytes(t *testing.T) {
	m := goodMap()
	if got := m.BoxBytes(); got != 64*32*2 {
		t.Errorf("BoxBytes = %d, want %d", got, 64*32*2)
	}
	m.ElemStrides = []uint32{4, 3} // dimension 0's stride is ignored; ceil(32/3) rows
	if got := m.BoxBytes(); got != 64*11*2 {
		t.Errorf("BoxBytes with element strides = %d, want %d", got, 64*11*2)
	}
}

// TestPackArgsTensorMap checks that a TensorMap is copied whole into a 64-byte
// aligned slot and that the arguments around it keep their values.
func TestPackArgsTensorMap(t *testing.T) {
	var a, b TensorMap
	for i := range a {
		a[i], b[i] = byte(i), byte(255-i)
	}
	args := []any{int8(-3), a, DevicePtr(0xdead0000), b, int32(7)}
	buf, err := packArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	// at follows argument i's pointer, which must point into buf past the pointers.
	at := func(i int) unsafe.Pointer {
		off := uintptr(buf[i]) - uintptr(unsafe.Pointer(&buf[0]))
		if off < uintptr(8*len(args)) || off >= uintptr(8*len(buf)) {
			t.Fatalf("argument %d: pointer %#x outside the value area", i, buf[i])
		}
		return unsafe.Add(unsafe.Pointer(&buf[0]), off)
	}
	for _, i := range []int{1, 3} {
		p := at(i)
		if uintptr(p)%64 != 0 {
			t.Errorf("argument %d (TensorMap) at %p, not 64-byte aligned", i, p)
		}
		if got := *(*TensorMap)(p); got != args[i].(TensorMap) {
			t.Errorf("argument %d (TensorMap): bytes differ", i)
		}
	}
	if v := *(*int8)(at(0)); v != -3 {
		t.Errorf("argument 0 = %d, want -3", v)
	}
	if v := *(*DevicePtr)(at(2)); v != 0xdead0000 {
		t.Errorf("argument 2 = %#x, want 0xdead0000", uint64(v))
	}
	if v := *(*int32)(at(4)); v != 7 {
		t.Errorf("argument 4 = %d, want 7", v)
	}
	if _, err := packArgs([]any{&a}); err == nil || !strings.Contains(err.Error(), "by value") {
		t.Errorf("packArgs(*TensorMap) = %v, want a hint to pass it by value", err)
	}
	f := &Function{name: "k", params: []int{128, 8}}
	if err := f.checkArgs([]any{a, DevicePtr(1)}); err != nil {
		t.Errorf("TensorMap for a 128-byte parameter refused: %v", err)
	}
}

// TestGPUTensorMapLoad encodes a 2-D bf16 map with the 128-byte swizzle and loads
// boxes with one TMA copy each: inside the matrix, and hanging over its bottom-right
// corner, where the copy fills zeros. The matrix has padded rows (pitch 208 columns
// for 200), so the stride is not the width.
func TestGPUTensorMapLoad(t *testing.T) {
	d := openGPU(t)
	if major, _ := d.ComputeCapability(); major < 9 {
		gputest.Skipf(t, "skipping: %s is %s; TMA needs sm_90", d.Name(), d.Arch())
	}
	n, err := NVRTCFor("sm_90a")
	if err != nil {
		gputest.Skipf(t, "skipping: %v", err)
	}
	const rows, cols, pitch = 100, 200, 208
	rng := rand.New(rand.NewPCG(3, 4))
	host := make([]uint16, rows*pitch)
	for i := range host {
		host[i] = uint16(rng.Uint32())&0x7ffe | 1 // never 0 (the fill) nor 0xffff (poison)
	}
	src := alloc(t, d, 2*len(host))
	if err := CopyHtoD(d, src, host); err != nil {
		t.Fatal(err)
	}
	m := TiledMap{DType: tensor.BF16, Addr: src, Dims: []uint64{cols, rows},
		Strides: []uint64{2 * pitch}, Box: []uint32{tmaBoxCols, tmaBoxRows},
		Swizzle: Swizzle128B, L2Promotion: L2Promote128B}
	tm, err := d.EncodeTiled(m)
	if err != nil {
		t.Fatal(err)
	}
	cubin, log, err := n.CompileCUBIN(tmaBoxSrc, "tma_box.cu", "sm_90a", nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	mod, err := d.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	fn, err := mod.Function("tma_box")
	if err != nil {
		t.Fatal(err)
	}
	out := alloc(t, d, 2*tmaBoxCols*tmaBoxRows)
	for _, at := range [][2]int32{{64, 16}, {0, 0}, {cols - 40, rows - 20}} {
		c0, r0 := at[0], at[1]
		// Poison with bf16 NaNs (0xffff): the out-of-bounds fill is 0, so NaN
		// bits of f32 (0x7fc00000, half zeros) would hide an unwritten element.
		if err := d.Memset32(out, 0xffffffff, tmaBoxCols*tmaBoxRows/2); err != nil {
			t.Fatal(err)
		}
		if err := fn.Launch([3]uint32{1, 1, 1}, [3]uint32{128, 1, 1}, uint32(m.BoxBytes()+1024),
			nil, tm, c0, r0, out); err != nil {
			t.Fatal(err)
		}
		got := make([]uint16, tmaBoxCols*tmaBoxRows)
		if err := CopyDtoH(d, got, out); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for r := 0; r < tmaBoxRows; r++ {
			for c := 0; c < tmaBoxCols; c++ {
				gr, gc := int(r0)+r, int(c0)+c
				var want uint16
				if gr < rows && gc < cols {
					want = host[gr*pitch+gc]
				}
				if g := got[r*tmaBoxCols+c]; g != want && bad < 5 {
					bad++
					t.Errorf("box at (%d, %d): element (%d, %d) = %#04x, want %#04x", c0, r0, r,
						c, g, want)
				}
			}
		}
	}
}
