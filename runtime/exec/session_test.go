package exec

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// TestGPUSession runs the zoo and gpt_mini's training step three times each
// through one Session, with new random inputs every time (and, once, weights
// passed as inputs in place of their Data), and wants every output bit-identical
// to RunWith's and within tolerance of the CPU interpreter's. Close must give
// back the memory the session held.
func TestGPUSession(t *testing.T) {
	dev := devicetest.Open(t)
	// freeMem is the device's free memory; what the session holds is measured
	// by its fall.
	freeMem := func() uint64 {
		t.Helper()
		free, err := dev.FreeMem()
		if err != nil {
			t.Fatal(err)
		}
		return free
	}
	opts := Options{Poison: true, CacheDir: t.TempDir()}
	zf, _ := cudatest.Zoo(t, 1)
	gf := drivertest.TrainingGraph(t, "../../testdata/onnx/gpt_mini.onnx")

	// Warm up the context: its first launches reserve memory (local memory,
	// cuBLASLt's own state) that no unload or free gives back, and would read as
	// a leak of the session.
	_, zin := cudatest.Zoo(t, 1)
	for f, in := range map[*ir.Func]map[string]*tensor.Tensor{zf: zin, gf: randomInputs(gf, 9)} {
		if _, err := RunWith(dev, f, in, opts); err != nil {
			t.Fatalf("warm-up @%s: %v", f.Name, err)
		}
	}
	before := freeMem()

	s := NewSession(dev, opts)
	// A failed first run caches nothing and leaves the session usable.
	if _, err := s.Run(zf, nil); err == nil {
		t.Fatal("Run without inputs succeeded")
	}
	for i := range 3 {
		_, zin := cudatest.Zoo(t, uint64(i+1)) // the same function, new values
		sessionCheck(t, s, zf, zin, opts, 1e-5)
		gin := randomInputs(gf, uint64(i+10))
		if i == 1 {
			// Weights passed as inputs, as the trainer does, replace the resident
			// Data for this run only; the next run must upload Data again.
			for _, p := range gf.Params {
				if p.Data != nil && p.Data.DType.IsFloat() {
					gin[p.Name] = perturb(p.Data, uint64(i))
				}
			}
		}
		sessionCheck(t, s, gf, gin, opts, 1e-4)
	}

	during := freeMem()
	var arenas uint64
	for _, f := range []*ir.Func{zf, gf} {
		p, err := codegen.Build(f, codegen.Options{Arch: dev.Arch()})
		if err != nil {
			t.Fatal(err)
		}
		_, peak := PlanArena(p.Plan)
		arenas += uint64(peak)
	}
	if during+arenas > before {
		t.Errorf("free memory fell by %d bytes during the session, less than its arenas' %d",
			before-during, arenas)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	after := freeMem()
	t.Logf("free memory: %d before, %d during (arenas %d), %d after Close",
		before, during, arenas, after)
	const margin = 8 << 20
	if after+margin < before {
		t.Errorf("Close left %d bytes in use (free %d before the session, %d after)",
			before-after, before, after)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Run(zf, zin); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: got %v, want ErrClosed", err)
	}
}

// sessionCheck runs f through s and wants its outputs bit-identical to RunWith's
// on the session's device and within tol of the CPU interpreter's.
func sessionCheck(t *testing.T, s *Session, f *ir.Func, in map[string]*tensor.Tensor, opts Options,
	tol float64) {
	t.Helper()
	got, err := s.Run(f, in)
	if err != nil {
		t.Fatalf("session @%s: %v", f.Name, err)
	}
	ref, err := RunWith(s.dev, f, in, opts)
	if err != nil {
		t.Fatalf("RunWith @%s: %v", f.Name, err)
	}
	want, err := interp.Run(f, in, interp.Options{})
	if err != nil {
		t.Fatalf("cpu @%s: %v", f.Name, err)
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if got[n] == nil {
			t.Fatalf("@%s: session returned no output %q", f.Name, n)
		}
		if !sameBits(got[n], ref[n]) {
			t.Errorf("@%s output %q: session %v... differs from RunWith %v...",
				f.Name, n, head(got[n]), head(ref[n]))
		}
		if e := relErr(got[n], want[n]); e > tol {
			t.Errorf("@%s output %q: relative error %.3g > %.1g (gpu %v..., cpu %v...)", f.Name, n, e, tol,
				head(got[n]), head(want[n]))
		}
	}
}

// sameBits reports whether a and b hold the same dtype, shape and bits.
func sameBits(a, b *tensor.Tensor) bool {
	if a == nil || b == nil || a.DType != b.DType || !slices.Equal(a.Shape, b.Shape) ||
		len(a.F) != len(b.F) || len(a.I) != len(b.I) {
		return false
	}
	for i := range a.F {
		if math.Float64bits(a.F[i]) != math.Float64bits(b.F[i]) {
			return false
		}
	}
	return slices.Equal(a.I, b.I)
}

// perturb returns a copy of t with small normal noise added to every element.
func perturb(t *tensor.Tensor, seed uint64) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 5))
	x := tensor.New(t.DType, t.Shape...)
	copy(x.F, t.F)
	for i := range x.F {
		x.F[i] += 0.01 * rng.NormFloat64()
	}
	return x
}

// TestSessionNoDevice needs no GPU: a session without a device fails every run
// with an error, and closes cleanly.
func TestSessionNoDevice(t *testing.T) {
	f, in := cudatest.Zoo(t, 1)
	s := NewSession(nil, Options{})
	if _, err := s.Run(f, in); err == nil {
		t.Fatal("Run on a nil device succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGPURuns needs no GPU: a program whose kernel was built for another
// architecture is refused naming the kernel, the program's arch and the GPU;
// portable kernels and the GPU's own generation's pass.
func TestGPURuns(t *testing.T) {
	hopper := GPU{Name: "NVIDIA H200", Arch: "sm_90", CodegenArch: "sm_90a"}
	prog := &codegen.Program{Plan: &codegen.LaunchPlan{Arch: "sm_100a"},
		Kernels: []codegen.Kernel{{Name: "k0"}, {Name: "flash_fwd", Arch: "sm_100a"}}}
	err := hopper.Runs(prog)
	for _, want := range []string{"flash_fwd", "sm_100a", "NVIDIA H200"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Runs = %v, want an error naming %s", err, want)
		}
	}
	prog.Kernels[1].Arch = "sm_90a"
	if err := hopper.Runs(prog); err != nil {
		t.Fatalf("Runs of runnable kernels: %v", err)
	}
	ampere := GPU{Name: "NVIDIA A100", Arch: "sm_80", CodegenArch: "sm_80"}
	if err := ampere.Runs(prog); err == nil {
		t.Fatal("an sm_90a kernel runs on an sm_80 GPU")
	}
	if err := NewSession(nil, Options{}).Adopt(nil, prog); err == nil {
		t.Fatal("Adopt on a nil device succeeded")
	}
	if g := NewSession(nil, Options{}).GPU(); g != (GPU{}) {
		t.Fatalf("GPU of a session without a device = %+v, want the zero GPU", g)
	}
}
