package exec

// Tests named TestGPU* need a GPU and skip, saying why, when the driver cannot be
// loaded or no device opens. Every computed buffer is poisoned with NaN first, so
// a kernel that leaves an element unwritten cannot pass.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// sharedCache is one kernel cache for every comparison in the test binary, so a
// kernel several tests generate compiles once; TestMain makes and removes it.
var sharedCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lcc-exec-test")
	if err == nil {
		sharedCache = dir
	}
	code := m.Run()
	if err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// relErr is max|g − c| / max|c| over the elements (normwise), with infinities
// required to match exactly and a NaN in g where c has none counted as +Inf.
func relErr(g, c *tensor.Tensor) float64 {
	if !c.DType.IsFloat() {
		for i := range c.I {
			if g.I[i] != c.I[i] {
				return math.Inf(1)
			}
		}
		return 0
	}
	var num, den float64
	for i, cv := range c.F {
		gv := g.F[i]
		switch {
		case math.IsNaN(cv):
			if !math.IsNaN(gv) {
				return math.Inf(1)
			}
		case math.IsInf(cv, 0):
			if gv != cv {
				return math.Inf(1)
			}
		case math.IsNaN(gv) || math.IsInf(gv, 0):
			return math.Inf(1)
		default:
			num = max(num, math.Abs(gv-cv))
			den = max(den, math.Abs(cv))
		}
	}
	if num == 0 {
		return 0
	}
	return num / max(den, 1e-30)
}

// compare runs f on the GPU and the CPU and checks every output.
func compare(t *testing.T, dev *cuda.Device, f *ir.Func, in map[string]*tensor.Tensor, opts Options, tol float64) {
	t.Helper()
	want, err := interp.Run(f, in, interp.Options{})
	if err != nil {
		t.Fatalf("cpu: %v", err)
	}
	got, err := RunWith(dev, f, in, testOptions(t, opts))
	if err != nil {
		t.Fatalf("gpu: %v", err)
	}
	sameOutputs(t, got, want, tol, "gpu", "cpu")
}

// testOptions is opts with every buffer poisoned and the tests' kernel cache.
func testOptions(t *testing.T, opts Options) Options {
	opts.Poison = true
	opts.CacheDir = sharedCache
	if sharedCache == "" {
		opts.CacheDir = t.TempDir()
	}
	return opts
}

// sameOutputs fails t for each output of want (in name order) that got does not
// match within relative tol; a and b name the two sides in the messages.
func sameOutputs(t *testing.T, got, want map[string]*tensor.Tensor, tol float64, a, b string) {
	t.Helper()
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := relErr(got[n], want[n])
		if e > tol {
			t.Errorf("output %q: relative error %.3g > %.1g (%s %v..., %s %v...)", n, e, tol,
				a, head(got[n]), b, head(want[n]))
		} else {
			t.Logf("output %q: relative error %.3g", n, e)
		}
	}
}

func head(t *tensor.Tensor) string {
	if t.DType.IsFloat() {
		return fmt.Sprint(t.F[:min(4, len(t.F))])
	}
	return fmt.Sprint(t.I[:min(4, len(t.I))])
}

// TestGPUFamilies runs every kernel family (the zoo) against the CPU
// interpreter on random data, with f32 and with bf16 storage.
func TestGPUFamilies(t *testing.T) {
	dev := devicetest.Open(t)
	f, in := cudatest.Zoo(t, 1)
	t.Run("f32", func(t *testing.T) { compare(t, dev, f, in, Options{}, 1e-5) })
	t.Run("bf16", func(t *testing.T) { compare(t, dev, f, in, Options{Storage: tensor.BF16}, 2e-2) })
}

// randomInputs fills every parameter without data: integers in [0, 16) (token
// ids and labels below any shared model's vocabulary), floats normal.
func randomInputs(f *ir.Func, seed uint64) map[string]*tensor.Tensor {
	return drivertest.RandomInputs(f, rand.New(rand.NewPCG(seed, 3)), 16)
}

// TestGPUGPTForward runs gpt_mini's forward pass against the CPU interpreter.
func TestGPUGPTForward(t *testing.T) {
	dev := devicetest.Open(t)
	f, err := driver.Load("../../testdata/onnx/gpt_mini.onnx", driver.Bindings{SeqLen: 16, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	compare(t, dev, f, randomInputs(f, 1), Options{}, 1e-5)
}

// TestGPUTrainingStep runs every shared model's forward and backward pass; the
// tolerance is looser than per kernel because gradients chain many fp32 sums
// whose order differs from the CPU's float64 ones.
func TestGPUTrainingStep(t *testing.T) {
	dev := devicetest.Open(t)
	files, _ := filepath.Glob("../../testdata/onnx/*.onnx")
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f := drivertest.TrainingGraph(t, path)
			compare(t, dev, f, randomInputs(f, 2), Options{}, 1e-4)
		})
	}
}

// hugeFunc keeps five 32 GiB tensors alive (160 GiB), more than any single GPU
// lcc targets has.
func hugeFunc(t *testing.T) *ir.Func {
	t.Helper()
	f, err := ir.Parse(`func @huge() {
  %0 = full() {dtype=f64, shape=[65536,65536], value=1} : f64[65536,65536]
  %1 = exp(%0) : f64[65536,65536]
  %2 = transpose(%1) {perm=[1,0]} : f64[65536,65536]
  %3 = transpose(%2) {perm=[1,0]} : f64[65536,65536]
  %4 = transpose(%3) {perm=[1,0]} : f64[65536,65536]
  %5 = transpose(%4) {perm=[1,0]} : f64[65536,65536]
  return %1 "a", %2 "b", %3 "c", %4 "d", %5 "e"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestArenaHuge checks, without a GPU, that the huge plan's arena exceeds 150 GiB.
func TestArenaHuge(t *testing.T) {
	p, err := codegen.Build(hugeFunc(t), codegen.Options{Arch: "sm_90"})
	if err != nil {
		t.Fatal(err)
	}
	if _, peak := PlanArena(p.Plan); peak < 150<<30 {
		t.Fatalf("arena %d bytes, want ≥ 150 GiB", peak)
	}
}

// TestGPUOutOfMemory wants a clear error, before any allocation, for a plan
// larger than the device.
func TestGPUOutOfMemory(t *testing.T) {
	dev := devicetest.Open(t)
	_, err := RunWith(dev, hugeFunc(t), nil, Options{CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "peak") || !strings.Contains(err.Error(), "free") {
		t.Fatalf("got %v, want an error giving the peak and free bytes", err)
	}
	t.Log(err)
}

// TestRunNoDevice needs no GPU: a nil device is an error, not a panic.
func TestRunNoDevice(t *testing.T) {
	f, _ := cudatest.Zoo(t, 1)
	if _, err := Run(nil, f, nil); err == nil {
		t.Fatal("Run(nil device) succeeded")
	}
}

// TestPlanArena checks, for every shared model's training step, that no two
// buffers alive at the same step overlap in the arena, and that the arena is
// smaller than allocating every buffer.
func TestPlanArena(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/onnx/*.onnx")
	if len(files) == 0 {
		t.Fatal("no models")
	}
	for _, path := range files {
		f := drivertest.TrainingGraph(t, path)
		p, err := codegen.Build(f, codegen.Options{Arch: "sm_90"})
		if err != nil {
			t.Fatal(err)
		}
		offs, peak := PlanArena(p.Plan)
		live := liveness(p.Plan)
		var total int64
		for _, b := range p.Plan.Buffers {
			if offs[b.ID] >= 0 {
				total += b.Bytes
			}
		}
		for _, a := range p.Plan.Buffers {
			for _, b := range p.Plan.Buffers {
				if a.ID >= b.ID || offs[a.ID] < 0 || offs[b.ID] < 0 || a.Bytes == 0 || b.Bytes == 0 {
					continue
				}
				la, lb := live[a.ID], live[b.ID]
				if la[0] > lb[1] || lb[0] > la[1] {
					continue
				}
				if offs[a.ID] < offs[b.ID]+b.Bytes && offs[b.ID] < offs[a.ID]+a.Bytes {
					t.Fatalf("%s: buffers %%%d and %%%d overlap while both live", filepath.Base(path), a.ID, b.ID)
				}
			}
		}
		if peak > total+int64(len(p.Plan.Buffers))*arenaAlign {
			t.Errorf("%s: arena %d bytes exceeds the sum of buffers %d", filepath.Base(path), peak, total)
		}
		t.Logf("%s: arena %d bytes, buffers %d bytes", filepath.Base(path), peak, total)
	}
}

// liveness recomputes buffer lifetimes independently of PlanArena: the steps
// touching the buffer or any alias of it, whole-run for parameters, constants
// and outputs.
func liveness(p *codegen.LaunchPlan) map[int][2]int {
	owner := func(id int) int {
		if p.Buffers[id].Kind == "alias" {
			return p.Buffers[id].AliasOf
		}
		return id
	}
	live := map[int][2]int{}
	touch := func(id, lo, hi int) {
		l, ok := live[id]
		if !ok {
			l = [2]int{lo, hi}
		}
		live[id] = [2]int{min(l[0], lo), max(l[1], hi)}
	}
	for i, s := range p.Steps {
		for _, a := range s.Args {
			touch(owner(a), i, i)
		}
	}
	for _, b := range p.Buffers {
		if b.Kind == "param" || b.Kind == "const" {
			touch(b.ID, -1, len(p.Steps))
		}
	}
	for _, o := range p.Outputs {
		touch(owner(o.ID), -1, len(p.Steps))
	}
	return live
}
