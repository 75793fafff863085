package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/lcc-dev/lcc/internal/gputest"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/ir"
	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// nvrtcArch maps a target's arch to what lcc compiles for: PTX (compute_XX)
// for Ampere-class targets, which the driver JITs for later GPUs, and a cubin for
// Hopper (sm_90, and sm_90a for the h100 and h200 targets).
func nvrtcArch(arch string) string {
	if strings.HasPrefix(arch, "sm_90") {
		return arch
	}
	return strings.Replace(arch, "sm_", "compute_", 1)
}

// checkPlan checks that every step names a kernel or GEMM correctly and every
// argument is a buffer that is allocated (not inline).
func checkPlan(t *testing.T, name string, p *codegen.Program) {
	t.Helper()
	byName := map[string]codegen.Kernel{}
	for _, k := range p.Kernels {
		if _, dup := byName[k.Name]; dup {
			t.Errorf("%s: kernel %s listed twice", name, k.Name)
		}
		byName[k.Name] = k
	}
	for i, s := range p.Plan.Steps {
		want := 3
		if s.Kind == "kernel" {
			k, ok := byName[s.Kernel]
			if !ok {
				t.Errorf("%s: step %d: unknown kernel %q", name, i, s.Kernel)
				continue
			}
			want = len(k.Params)
		}
		if len(s.Args) != want {
			t.Errorf("%s: step %d (%s): %d args, want %d", name, i, s.Op, len(s.Args), want)
		}
		for _, a := range s.Args {
			if a < 0 || a >= len(p.Plan.Buffers) || p.Plan.Buffers[a].Kind == "inline" {
				t.Errorf("%s: step %d (%s): bad buffer %d", name, i, s.Op, a)
			}
		}
	}
}

// TestBuildModels lowers every shared model's training step (forward and
// backward) with f32 and bf16 storage.
func TestBuildModels(t *testing.T) {
	for _, path := range models(t) {
		f := drivertest.TrainingGraph(t, path)
		for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
			p, err := codegen.Build(f, codegen.Options{Arch: "sm_90", Storage: st})
			if err != nil {
				t.Fatalf("%s (%v): %v", filepath.Base(path), st, err)
			}
			checkPlan(t, filepath.Base(path), p)
			gemms := 0
			for _, s := range p.Plan.Steps {
				if s.Kind == "gemm" {
					gemms++
				}
			}
			t.Logf("%s %v: %d nodes, %d steps (%d gemm), %d kernels", filepath.Base(path), st,
				len(f.Body), len(p.Plan.Steps), gemms, len(p.Kernels))
		}
	}
}

// TestDeterministic builds the same graph twice, from two loads, and wants the
// same kernels and plan bytes.
func TestDeterministic(t *testing.T) {
	path := models(t)[0]
	for _, m := range models(t) {
		if strings.Contains(m, "gpt_mini_loss") {
			path = m
		}
	}
	render := func() ([]codegen.Kernel, []byte) {
		p, err := codegen.Build(drivertest.TrainingGraph(t, path), codegen.Options{Arch: "sm_90"})
		if err != nil {
			t.Fatal(err)
		}
		js, err := codegen.PlanJSON(p.Kernels, p.Plan)
		if err != nil {
			t.Fatal(err)
		}
		return p.Kernels, js
	}
	k1, j1 := render()
	k2, j2 := render()
	if !bytes.Equal(j1, j2) {
		t.Fatal("launch plans differ between two builds")
	}
	if len(k1) != len(k2) {
		t.Fatalf("%d kernels, then %d", len(k1), len(k2))
	}
	for i := range k1 {
		if k1[i].Name != k2[i].Name || k1[i].Source != k2[i].Source {
			t.Fatalf("kernel %d differs: %s vs %s", i, k1[i].Name, k2[i].Name)
		}
	}
}

// TestFusion checks that a chain of elementwise ops becomes one kernel storing
// only what escapes it.
func TestFusion(t *testing.T) {
	f, err := ir.Parse(`func @f(
    %0: f32[4,8] input "x",
    %1: f32[8] input "b",
) {
  %2 = add(%0, %1) : f32[4,8]
  %3 = exp(%2) : f32[4,8]
  %4 = constant() {value=f32[]{2}} : f32[]
  %5 = mul(%3, %4) : f32[4,8]
  return %5 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	p, err := codegen.Build(f, codegen.Options{Arch: "compute_80"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Plan.Steps) != 1 || len(p.Kernels) != 1 {
		t.Fatalf("%d steps, %d kernels, want 1 and 1", len(p.Plan.Steps), len(p.Kernels))
	}
	src := p.Kernels[0].Source
	for _, want := range []string{"lcc_exp(", "2.0f", "(x0 + x1)", "lcc_st16(out0"} {
		if !strings.Contains(src, want) {
			t.Errorf("kernel lacks %q:\n%s", want, src)
		}
	}
	if got := p.Plan.Steps[0].Args; len(got) != 3 {
		t.Errorf("args %v, want out, x, b", got)
	}
}

// TestWriteKernels writes a program and reads the plan back.
func TestWriteKernels(t *testing.T) {
	f, _ := cudatest.Zoo(t, 1)
	p, err := codegen.Build(f, codegen.Options{Arch: "compute_80"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := codegen.WriteKernels(dir, p.Kernels, p.Plan); err != nil {
		t.Fatal(err)
	}
	for _, k := range p.Kernels {
		b, err := os.ReadFile(filepath.Join(dir, "kernels", k.Name+".cu"))
		if err != nil || string(b) != k.Source {
			t.Fatalf("kernels/%s.cu: %v", k.Name, err)
		}
	}
	js, err := os.ReadFile(filepath.Join(dir, "launch_plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind": "gemm"`, `"steps"`, `"buffers"`, `"kernels"`} {
		if !bytes.Contains(js, []byte(want)) {
			t.Errorf("launch_plan.json lacks %s", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "constants.safetensors")); err != nil {
		t.Errorf("constants.safetensors: %v", err)
	}
}

// compileJob is one distinct (source, arch) pair to compile.
type compileJob struct {
	name, arch, src, from string
}

// TestNVRTCCompile generates the kernels of every shared model's training step
// and of the zoo (every family), with f32 and bf16 storage, for every built-in
// target's arch, and compiles each distinct source with NVRTC.
func TestNVRTCCompile(t *testing.T) {
	v, err := rcuda.NVRTCVersion()
	if errors.Is(err, rcuda.ErrUnavailable) {
		gputest.Skipf(t, "skipping: no NVRTC library could be loaded (tried $%s, libnvrtc.so.13, .so.12, "+
			".so.11.2 and libnvrtc.so; install Debian's libnvrtc11.2 from non-free): %v", rcuda.EnvNVRTC, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cache, err := rcuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// sm_90 as well: a Hopper GPU without an NVRTC for sm_90a runs tier 1.
	archs := map[string]bool{"sm_90": true}
	for _, tg := range targets.All() {
		if !tg.IsCPU() {
			archs[nvrtcArch(tg.Arch)] = true
		}
	}
	// Tier 2 (sm_90a) needs NVRTC 12 or later: the default one, or LCC_NVRTC12's
	// (CI unpacks Debian's NVRTC 12.4 for it).
	_, err90a := rcuda.NVRTCFor("sm_90a")
	if err90a != nil && !errors.Is(err90a, rcuda.ErrUnavailable) {
		t.Fatal(err90a)
	}
	skipped := 0
	graphs := map[string]*ir.Func{}
	for _, path := range models(t) {
		graphs[filepath.Base(path)] = drivertest.TrainingGraph(t, path)
	}
	graphs["zoo"], _ = cudatest.Zoo(t, 1)
	for name, c := range drivertest.FlagshipSteps {
		graphs["flagship_"+name] = drivertest.FlagshipStep(t, c)
	}
	var jobs []compileJob
	seen := map[string]bool{}
	for _, arch := range sortedKeys(archs) {
		for _, name := range sortedKeys(graphs) {
			for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
				p, err := codegen.Build(graphs[name], codegen.Options{Arch: arch, Storage: st})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, k := range p.Kernels {
					ka := arch
					if arch == "sm_90a" && k.Arch == "" {
						ka = "sm_90" // the same source as the sm_90 build's
					}
					key := ka + "\x00" + k.Name
					if seen[key] {
						continue
					}
					seen[key] = true
					if ka == "sm_90a" && err90a != nil {
						skipped++
						continue
					}
					jobs = append(jobs, compileJob{k.Name, ka, k.Source, fmt.Sprintf("%s/%v", name, st)})
				}
			}
		}
	}
	start := time.Now()
	var mu sync.Mutex
	var failed int
	ch := make(chan compileJob)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for j := range ch {
				_, err := cache.Get(j.src, j.name+".cu", j.arch, nil)
				if err != nil {
					mu.Lock()
					failed++
					if failed <= 5 {
						t.Errorf("kernel %s (from %s) for %s: %v", j.name, j.from, j.arch, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	if failed > 5 {
		t.Errorf("... and %d more kernels failed", failed-5)
	}
	t.Logf("NVRTC %s: compiled %d distinct kernels for %v in %v", v, len(jobs), sortedKeys(archs),
		time.Since(start).Round(time.Millisecond))
	if skipped > 0 {
		t.Logf("not compiled: %d tier-2 kernels for sm_90a (%v)", skipped, err90a)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
