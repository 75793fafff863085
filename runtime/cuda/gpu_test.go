package cuda

// Tests named TestGPU* need a GPU and skip, saying why, when the driver cannot be
// loaded or no device opens. Outputs are poisoned (NaN) before every kernel so a
// kernel that writes nothing cannot pass.

import (
	"errors"
	"fmt"
	"github.com/lcc-dev/lcc/internal/gputest"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/tensor"
)

// nanBits is a quiet NaN, the poison written into outputs before a kernel runs.
const nanBits = 0x7fc00000

// openGPU opens device 0 or skips the test with the reason.
func openGPU(t *testing.T) *Device {
	t.Helper()
	d, err := Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// alloc allocates n elements of size bytes and frees them when the test ends.
func alloc(t *testing.T, d *Device, bytes int) DevicePtr {
	t.Helper()
	p, err := d.Alloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	return p
}

// randF32 returns n values uniform in [-1, 1).
func randF32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*rng.Float32() - 1
	}
	return v
}

// relErr returns ‖got − want‖₂ / ‖want‖₂.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

func TestGPUSymbols(t *testing.T) {
	openGPU(t)
	for _, s := range driverSymbols {
		if _, err := s.resolve(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
	if _, err := cuFuncGetParamInfo.resolve(); err != nil {
		t.Logf("cuFuncGetParamInfo unavailable (driver older than 12.4): launches go unchecked")
	}
	for name, syms := range map[string][]*symbol{"cuBLASLt": cublasLtSymbols, "NCCL": ncclSymbols} {
		for _, s := range syms {
			if _, err := s.resolve(); err != nil {
				if errors.As(err, new(*LibraryError)) {
					t.Logf("%s not installed: %v", name, err)
					break
				}
				t.Errorf("%s: %v", s.name, err)
			}
		}
	}
}

func TestGPUDevice(t *testing.T) {
	d := openGPU(t)
	major, minor := d.ComputeCapability()
	free, err := d.FreeMem()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := DriverVersion()
	t.Logf("%s: sm_%d%d, %d SMs, %d MiB total, %d MiB free, driver %d", d.Name(), major, minor,
		d.Multiprocessors(), d.TotalMem()>>20, free>>20, v)
	if d.Name() == "" || major < 5 || d.TotalMem() == 0 || free == 0 || free > d.TotalMem() {
		t.Errorf("implausible device: name %q, cc %d.%d, total %d, free %d", d.Name(), major,
			minor, d.TotalMem(), free)
	}
	if _, err := Open(1 << 20); err == nil {
		t.Error("Open of a nonexistent ordinal succeeded")
	}
}

func TestGPUAllocCopy(t *testing.T) {
	d := openGPU(t)
	const n = 1<<16 + 3
	rng := rand.New(rand.NewPCG(1, 2))
	src := randF32(rng, n)
	p := alloc(t, d, 4*n)
	if err := d.Memset32(p, nanBits, n); err != nil {
		t.Fatal(err)
	}
	if err := CopyHtoD(d, p, src); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	for i := range got {
		got[i] = float32(math.NaN())
	}
	if err := CopyDtoH(d, got, p); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if math.Float32bits(got[i]) != math.Float32bits(src[i]) {
			t.Fatalf("element %d: %v after a round trip, want %v", i, got[i], src[i])
		}
	}

	// Device to device into an offset sub-buffer, then Memset32 and Memset8.
	q := alloc(t, d, 4*n+256)
	if err := d.CopyDtoD(q+256, p, 4*n); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset32(q, math.Float32bits(7.5), 64); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, 64+n)
	if err := CopyDtoH(d, back, q); err != nil {
		t.Fatal(err)
	}
	if back[0] != 7.5 || back[63] != 7.5 || back[64] != src[0] || back[64+n-1] != src[n-1] {
		t.Errorf("CopyDtoD/Memset32: got %v %v %v %v", back[0], back[63], back[64], back[64+n-1])
	}
	if err := d.Memset8(q, 0xab, 3); err != nil {
		t.Fatal(err)
	}
	bytes := make([]uint8, 4)
	if err := CopyDtoH(d, bytes, q); err != nil {
		t.Fatal(err)
	}
	if bytes[0] != 0xab || bytes[2] != 0xab || bytes[3] == 0xab {
		t.Errorf("Memset8: % x", bytes)
	}
	if _, err := d.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
}

// loadKernel compiles src through a private cache for the device, skipping when
// NVRTC is missing or too old for the device.
func loadKernel(t *testing.T, d *Device, src, name, arch string) *Function {
	t.Helper()
	needNVRTC(t)
	c, err := OpenCache(filepath.Join(t.TempDir(), "kernels"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := c.Get(src, name+".cu", arch, nil)
	if err != nil {
		if strings.Contains(err.Error(), "invalid value for --gpu-architecture") {
			gputest.Skipf(t, "skipping: this NVRTC does not know %s: %v", arch, err)
		}
		t.Fatal(err)
	}
	m, err := d.LoadModule(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unload() })
	f, err := m.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGPULaunchSaxpy(t *testing.T) {
	d := openGPU(t)
	major, minor := d.ComputeCapability()
	// The device's own cubin and, separately, PTX the driver JIT-compiles.
	for _, arch := range []string{d.Arch(), fmt.Sprintf("compute_%d%d", major, minor)} {
		t.Run(arch, func(t *testing.T) {
			f := loadKernel(t, d, saxpySrc, "saxpy", arch)
			const n = 100_003 // not a multiple of the block
			rng := rand.New(rand.NewPCG(3, 4))
			x, y := randF32(rng, n), randF32(rng, n)
			a := float32(2.5)
			dx, dy := alloc(t, d, 4*n), alloc(t, d, 4*n)
			if err := CopyHtoD(d, dx, x); err != nil {
				t.Fatal(err)
			}
			if err := CopyHtoD(d, dy, y); err != nil {
				t.Fatal(err)
			}
			const block = 256
			grid := uint32((n + block - 1) / block)
			if err := f.Launch([3]uint32{grid, 1, 1}, [3]uint32{block, 1, 1}, 0, nil,
				int32(n), a, dx, dy); err != nil {
				t.Fatal(err)
			}
			if err := d.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, n)
			if err := CopyDtoH(d, got, dy); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				want := float64(a)*float64(x[i]) + float64(y[i])
				if math.Abs(float64(got[i])-want) > 1e-6*math.Max(1, math.Abs(want)) {
					t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
				}
			}
			if f.params != nil {
				err := f.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, int32(n), a, dx)
				if err == nil {
					t.Error("a launch with a missing argument succeeded")
				}
			}
		})
	}
}

// argsSrc echoes parameters of every size; a packing error shows as a wrong value.
const argsSrc = `
extern "C" __global__ void echo_args(char c, short s, int i, long long l, float f,
		double d, unsigned char b, float* out) {
	out[0] = c; out[1] = s; out[2] = i; out[3] = (float)l; out[4] = f; out[5] = (float)d;
	out[6] = b;
}
`

func TestGPULaunchArgSizes(t *testing.T) {
	d := openGPU(t)
	f := loadKernel(t, d, argsSrc, "echo_args", d.Arch())
	out := alloc(t, d, 4*8)
	if err := d.Memset32(out, nanBits, 8); err != nil {
		t.Fatal(err)
	}
	if err := f.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, int8(-3), int16(-300),
		int32(70000), int64(1<<33), float32(1.25), float64(-2.5), uint8(200), out); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 7)
	if err := CopyDtoH(d, got, out); err != nil {
		t.Fatal(err)
	}
	want := []float32{-3, -300, 70000, 1 << 33, 1.25, -2.5, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parameter %d: kernel saw %v, want %v", i, got[i], want[i])
		}
	}
	t.Logf("driver-reported parameter sizes: %v", f.params)
}

func TestGPUModuleErrors(t *testing.T) {
	d := openGPU(t)
	if _, err := d.LoadModule([]byte("not ptx")); err == nil {
		t.Error("loading garbage succeeded")
	}
	f := loadKernel(t, d, saxpySrc, "saxpy", d.Arch())
	if err := f.Launch([3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, 1, float32(1), DevicePtr(0),
		DevicePtr(0)); err == nil || !strings.Contains(err.Error(), "int32 or int64") {
		t.Errorf("launch with a Go int: %v", err)
	}
}

func TestGPUEventTiming(t *testing.T) {
	d := openGPU(t)
	f := loadKernel(t, d, saxpySrc, "saxpy", d.Arch())
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	start, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	const n = 1 << 24
	x, y := alloc(t, d, 4*n), alloc(t, d, 4*n)
	d.Memset32(x, math.Float32bits(1), n)
	d.Memset32(y, 0, n)
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	const reps = 10
	for i := 0; i < reps; i++ {
		if err := f.Launch([3]uint32{n / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, s, int32(n),
			float32(1), x, y); err != nil {
			t.Fatal(err)
		}
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	el, err := end.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	gbps := float64(reps*3*4*n) / el.Seconds() / 1e9
	t.Logf("%d saxpy of %d floats: %v, %.0f GB/s", reps, n, el, gbps)
	if el <= 0 || el > 10*time.Second {
		t.Errorf("elapsed %v is implausible", el)
	}
	// A second stream waits for the first through an event.
	s2, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Destroy()
	if err := s2.Wait(end); err != nil {
		t.Fatal(err)
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 1)
	if err := CopyDtoH(d, got, y+DevicePtr(4*(n-1))); err != nil || got[0] != reps {
		t.Errorf("y[n-1] = %v, %v after %d saxpy, want %d", got, err, reps, reps)
	}
}

// gemmCase is one GEMM test; the strides are derived from the shape unless set.
type gemmCase struct {
	name           string
	transA, transB bool
	m, n, k, batch int
	padLD          int  // extra elements per row in A, B and C
	broadcastB     bool // B stride 0 across the batch
	beta           float32
	typ, ctype     tensor.DType
	tol            float64
}

func TestGPUGemm(t *testing.T) {
	d := openGPU(t)
	b, err := d.NewBlasLt()
	if errors.Is(err, ErrUnavailable) {
		gputest.Skipf(t, "skipping: no cuBLASLt: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cases := []gemmCase{
		{name: "f32 NN", m: 64, n: 48, k: 80},
		{name: "f32 TN", transA: true, m: 33, n: 17, k: 65},
		{name: "f32 NT", transB: true, m: 33, n: 17, k: 65},
		{name: "f32 TT", transA: true, transB: true, m: 20, n: 31, k: 129},
		{name: "f32 padded ld", m: 40, n: 24, k: 56, padLD: 8},
		{name: "f32 beta", m: 32, n: 32, k: 32, beta: 0.5},
		{name: "f32 batched", m: 24, n: 40, k: 72, batch: 3},
		{name: "f32 batched TN broadcast B", transA: true, m: 16, n: 24, k: 40, batch: 4,
			broadcastB: true},
		{name: "bf16 NN", m: 128, n: 64, k: 256, typ: tensor.BF16},
		{name: "bf16 NT batched", transB: true, m: 64, n: 96, k: 128, batch: 3, typ: tensor.BF16},
		{name: "bf16 TN", transA: true, m: 64, n: 32, k: 96, typ: tensor.BF16},
		{name: "bf16 in f32 out", m: 64, n: 64, k: 128, typ: tensor.BF16, ctype: tensor.F32, tol: 1e-5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runGemmCase(t, d, b, tc) })
	}
}

// runGemmCase runs one case on the GPU and compares with a float64 CPU GEMM of the
// same (rounded) inputs.
func runGemmCase(t *testing.T, d *Device, b *BlasLt, tc gemmCase) {
	if tc.typ == tensor.Invalid {
		tc.typ = tensor.F32
	}
	if tc.ctype == tensor.Invalid {
		tc.ctype = tc.typ
	}
	if tc.tol == 0 {
		tc.tol = map[tensor.DType]float64{tensor.F32: 1e-5, tensor.BF16: 2e-2}[tc.ctype]
	}
	batch := max(tc.batch, 1)
	rowsA, colsA := tc.m, tc.k
	if tc.transA {
		rowsA, colsA = tc.k, tc.m
	}
	rowsB, colsB := tc.k, tc.n
	if tc.transB {
		rowsB, colsB = tc.n, tc.k
	}
	lda, ldb, ldc := colsA+tc.padLD, colsB+tc.padLD, tc.n+tc.padLD
	sA, sB, sC := rowsA*lda, rowsB*ldb, tc.m*ldc
	if tc.broadcastB {
		sB = 0
	}
	if batch == 1 {
		sA, sB, sC = 0, 0, 0
	}
	lenA, lenB, lenC := (batch-1)*sA+rowsA*lda, (batch-1)*sB+rowsB*ldb, (batch-1)*sC+tc.m*ldc

	rng := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.k)))
	hA, hB, hC := randF32(rng, lenA), randF32(rng, lenB), randF32(rng, lenC)
	// upload rounds host values to the element type and returns what the GPU holds.
	upload := func(v []float32, dt tensor.DType) (DevicePtr, []float32) {
		p := alloc(t, d, len(v)*dt.Size())
		var err error
		if dt == tensor.BF16 {
			bits := make([]uint16, len(v))
			for i, x := range v {
				bits[i] = tensor.Float32ToBF16(x)
				v[i] = tensor.BF16ToFloat32(bits[i])
			}
			err = CopyHtoD(d, p, bits)
		} else {
			err = CopyHtoD(d, p, v)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p, v
	}
	dA, hA := upload(hA, tc.typ)
	dB, hB := upload(hB, tc.typ)
	var dC DevicePtr
	if tc.beta != 0 {
		dC, hC = upload(hC, tc.ctype)
	} else {
		dC = alloc(t, d, lenC*tc.ctype.Size())
		poison := uint32(nanBits)
		if tc.ctype == tensor.BF16 {
			poison = 0x7fc07fc0
		}
		if err := d.Memset32(dC, poison, lenC*tc.ctype.Size()/4); err != nil {
			t.Fatal(err)
		}
	}

	err := b.Gemm(nil, GemmParams{TransA: tc.transA, TransB: tc.transB, M: tc.m, N: tc.n, K: tc.k,
		A: dA, B: dB, C: dC, LDA: lda, LDB: ldb, LDC: ldc, Batch: batch,
		StrideA: int64(sA), StrideB: int64(sB), StrideC: int64(sC),
		Type: tc.typ, CType: tc.ctype, Alpha: 1, Beta: tc.beta})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, lenC)
	if tc.ctype == tensor.BF16 {
		bits := make([]uint16, lenC)
		err = CopyDtoH(d, bits, dC)
		for i, x := range bits {
			got[i] = tensor.BF16ToFloat32(x)
		}
	} else {
		err = CopyDtoH(d, got, dC)
	}
	if err != nil {
		t.Fatal(err)
	}

	var out []float32
	var ref []float64
	for bi := 0; bi < batch; bi++ {
		for i := 0; i < tc.m; i++ {
			for j := 0; j < tc.n; j++ {
				var s float64
				for l := 0; l < tc.k; l++ {
					ai := bi*sA + i*lda + l
					if tc.transA {
						ai = bi*sA + l*lda + i
					}
					bj := bi*sB + l*ldb + j
					if tc.transB {
						bj = bi*sB + j*ldb + l
					}
					s += float64(hA[ai]) * float64(hB[bj])
				}
				ci := bi*sC + i*ldc + j
				if tc.beta != 0 {
					s += float64(tc.beta) * float64(hC[ci])
				}
				ref = append(ref, s)
				out = append(out, got[ci])
			}
		}
	}
	e := relErr(out, ref)
	t.Logf("relative error %.2e (tolerance %.0e)", e, tc.tol)
	if !(e < tc.tol) { // also catches NaN from an unwritten output
		t.Errorf("relative error %.3e exceeds %.0e", e, tc.tol)
	}
}

func TestGPUNCCLSingleRank(t *testing.T) {
	d := openGPU(t)
	id, err := NCCLGetUniqueID()
	if errors.Is(err, ErrUnavailable) {
		gputest.Skipf(t, "skipping: no NCCL: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.NewComm(1, 0, id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const n = 1000
	src := randF32(rand.New(rand.NewPCG(5, 6)), n)
	send, recv := alloc(t, d, 4*n), alloc(t, d, 4*n)
	if err := CopyHtoD(d, send, src); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{
		func() error { return c.AllReduce(send, recv, n, tensor.F32, Sum, s) },
		func() error { return c.AllGather(send, recv, n, tensor.F32, s) },
		func() error { return c.ReduceScatter(send, recv, n, tensor.F32, Sum, s) },
	} {
		if err := d.Memset32(recv, nanBits, n); err != nil {
			t.Fatal(err)
		}
		if err := op(); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if err := CopyDtoH(d, got, recv); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != src[i] {
				t.Fatalf("one-rank collective: element %d = %v, want %v", i, got[i], src[i])
			}
		}
	}
}
