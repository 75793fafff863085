package cuda_test

import (
	"errors"
	"path/filepath"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/internal/gputest"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// fusedGraphs are llama_mini's training step, the flagship-like steps and the
// zoo, each after passes.Fuse, by name, and the same graphs unfused.
func fusedGraphs(t *testing.T) (fused, unfused map[string]*ir.Func) {
	t.Helper()
	graphs := map[string]*ir.Func{
		"llama_mini": drivertest.TrainingGraph(t, filepath.Join("..", "..", "testdata", "onnx", "llama_mini.onnx")),
	}
	graphs["zoo"], _ = cudatest.Zoo(t, 1)
	for name, c := range drivertest.FlagshipSteps {
		graphs["flagship_"+name] = drivertest.FlagshipStep(t, c)
	}
	fused = map[string]*ir.Func{}
	for name, f := range graphs {
		g := f.Clone()
		if _, err := passes.Fuse(g, passes.FuseConfig{}); err != nil {
			t.Fatalf("%s: fuse: %v", name, err)
		}
		fused[name] = g
	}
	return fused, graphs
}

// fusedKernels are the kernels p launches for fused_elementwise nodes of f.
func fusedKernels(f *ir.Func, p *codegen.Program) []codegen.Kernel {
	byName := map[string]codegen.Kernel{}
	for _, k := range p.Kernels {
		byName[k.Name] = k
	}
	var ks []codegen.Kernel
	seen := map[string]bool{}
	for _, s := range p.Plan.Steps {
		if s.Kind == "kernel" && f.Body[s.Node].Op == ir.OpFusedElementwise && !seen[s.Kernel] {
			seen[s.Kernel] = true
			ks = append(ks, byName[s.Kernel])
		}
	}
	return ks
}

// Issue 25: the kernels of fused_elementwise nodes (llama_mini's step, the
// flagship-like steps, the zoo; f32 and bf16 storage) compile with NVRTC for
// sm_80 and sm_90.
func TestNVRTCCompileFused(t *testing.T) {
	if _, err := rcuda.NVRTCVersion(); errors.Is(err, rcuda.ErrUnavailable) {
		gputest.Skipf(t, "skipping: no NVRTC library could be loaded: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	cache, err := rcuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	graphs, _ := fusedGraphs(t)
	compiled := 0
	seen := map[string]bool{}
	for _, arch := range []string{"sm_80", "sm_90"} {
		for _, name := range sortedKeys(graphs) {
			f := graphs[name]
			for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
				p, err := codegen.Build(f, codegen.Options{Arch: arch, Storage: st})
				if err != nil {
					t.Fatalf("%s/%v: %v", name, st, err)
				}
				ks := fusedKernels(f, p)
				if len(ks) == 0 && name != "zoo" {
					t.Errorf("%s/%v: no fused kernels", name, st)
				}
				for _, k := range ks {
					if seen[arch+k.Name] {
						continue
					}
					seen[arch+k.Name] = true
					if _, err := cache.Get(k.Source, k.Name+".cu", nvrtcArch(arch), nil); err != nil {
						t.Errorf("kernel %s (%s/%v) for %s: %v", k.Name, name, st, arch, err)
					}
					compiled++
				}
			}
		}
	}
	t.Logf("compiled %d distinct fused kernels", compiled)
}

// A fused step launches no more kernels than the unfused one, and its launch
// plan passes the checks every plan does.
func TestFusedLaunches(t *testing.T) {
	graphs, unfused := fusedGraphs(t)
	for _, name := range sortedKeys(graphs) {
		for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
			o := codegen.Options{Arch: "sm_90a", Storage: st}
			p, err := codegen.Build(graphs[name], o)
			if err != nil {
				t.Fatalf("%s/%v: %v", name, st, err)
			}
			checkPlan(t, name, p)
			q, err := codegen.Build(unfused[name], o)
			if err != nil {
				t.Fatalf("%s/%v unfused: %v", name, st, err)
			}
			_, arena := codegen.PlanArena(p.Plan)
			_, arenaQ := codegen.PlanArena(q.Plan)
			if len(p.Plan.Steps) > len(q.Plan.Steps) || arena > arenaQ {
				t.Errorf("%s/%v: fused %d steps, arena %d bytes; unfused %d steps, %d bytes", name, st,
					len(p.Plan.Steps), arena, len(q.Plan.Steps), arenaQ)
			}
			t.Logf("%s/%v: %d steps (unfused %d), arena %d (unfused %d), %d fused kernels", name, st,
				len(p.Plan.Steps), len(q.Plan.Steps), arena, arenaQ, len(fusedKernels(graphs[name], p)))
		}
	}
}
