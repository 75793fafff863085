package train

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// The GPUs of the tests below, as exec.GPUOf describes them.
var (
	h200GPU = exec.GPU{Name: "NVIDIA H200", Arch: "sm_90", CodegenArch: "sm_90a"}
	a100GPU = exec.GPU{Name: "NVIDIA A100-SXM4-80GB", Arch: "sm_80", CodegenArch: "sm_80"}
)

// TestForDevice needs no GPU: a program runs as compiled where the GPU can run
// it, is refused naming --recompile-for-device where it cannot, and is
// recompiled (for the target with the GPU's arch) only when the flag asks and
// the arch differs.
func TestForDevice(t *testing.T) {
	a100, h200 := mustLookup(t, "a100x1"), mustLookup(t, "h200x1")
	tier1 := &cudagen.Program{Plan: &cudagen.LaunchPlan{Arch: "sm_80"},
		Kernels: []cudagen.Kernel{{Name: "k0"}, {Name: "flash_fwd_t1"}}}
	tier2 := &cudagen.Program{Plan: &cudagen.LaunchPlan{Arch: "sm_90a"},
		Kernels: []cudagen.Kernel{{Name: "k0"}, {Name: "flash_fwd_t2", Arch: "sm_90a"}}}
	for _, c := range []struct {
		name      string
		target    targets.Target
		prog      *cudagen.Program
		gpu       exec.GPU
		recompile bool
		wantArch  string // the recompile's arch; "" runs prog as it is
		wantErr   []string
	}{
		{"a100 program on an H200", a100, tier1, h200GPU, false, "", nil},
		{"a100 program on an H200, recompiled", a100, tier1, h200GPU, true, "sm_90a", nil},
		{"h200 program on an H200, flag given", h200, tier2, h200GPU, true, "", nil},
		{"h200 program on an A100", h200, tier2, a100GPU, false, "",
			[]string{"--target=h200x1", "NVIDIA A100-SXM4-80GB", "flash_fwd_t2", RecompileFlag}},
		{"h200 program on an A100, recompiled", h200, tier2, a100GPU, true, "sm_80", nil},
		{"no program (a CPU target)", a100, nil, a100GPU, true, "", nil},
		{"no GPU described", h200, tier2, exec.GPU{}, false, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := forDevice(c.target, c.prog, c.gpu, c.recompile)
			if c.wantErr != nil {
				for _, w := range c.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("forDevice = %v, want an error containing %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.wantArch == "" && got != nil:
				t.Errorf("recompiled for %s, want the program run as compiled", got.Arch)
			case c.wantArch != "" && got == nil:
				t.Errorf("no recompile, want one for %s", c.wantArch)
			case c.wantArch != "":
				want := c.target
				want.Arch, want.ComputeCapability = c.wantArch, got.ComputeCapability
				if *got != want || got.ComputeCapability != map[string]int{"sm_80": 80, "sm_90a": 90}[c.wantArch] {
					t.Errorf("recompile target %+v, want %s with arch %s", *got, c.target.Name, c.wantArch)
				}
			}
		})
	}
	line := recompiledLine("m.onnx", false, h200GPU, a100, "sha256:new", "sha256:old")
	if want := "recompiled for sm_90a (NVIDIA H200): program sha256:old (was sha256:new for a100x1)"; line != want {
		t.Errorf("line %q\nwant %q", line, want)
	}
	line = recompiledLine("out/graph.lcc", true, h200GPU, a100, "sha256:a", "sha256:b")
	if !strings.HasPrefix(line, "recompiled out/graph.lcc's step for sm_90a") {
		t.Errorf("a compiled folder's line %q does not name the folder's graph", line)
	}
}

func mustLookup(t *testing.T, name string) targets.Target {
	t.Helper()
	tg, err := targets.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// fakeGPU is c on a described GPU whose executor is the CPU interpreter: Adopt
// records the program handed to it, so the trainer's device path is tested
// without a GPU.
func fakeGPU(c Config, gpu exec.GPU, adopted **cudagen.Program, progress *bytes.Buffer) Config {
	c.Device, c.GPU, c.Progress = "cuda", gpu, progress
	c.Run = func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
		return driver.RunCPU(f, in, tensor.F32, driver.HostBudget{})
	}
	c.Adopt = func(f *ir.Func, p *cudagen.Program) error {
		if err := gpu.Runs(p); err != nil {
			return err
		}
		*adopted = p
		return nil
	}
	return c
}

// TestRecompileForDevice trains gpt_mini compiled for an A100 on a described
// H200: as compiled (the a100x1 program, the hash lcc compile reports) without
// the flag, and with --recompile-for-device as an sm_90a program whose new hash
// the run prints and reports, naming the old one. A compiled folder's step is
// recompiled from its graph the same way; refused on an A100 when it holds an
// H200's program and the flag is not given.
func TestRecompileForDevice(t *testing.T) {
	a100 := mustLookup(t, "a100x1")
	c := small(t, 1)
	c.Target = a100
	compiled, err := Step(c)
	if err != nil {
		t.Fatal(err)
	}
	var adopted *cudagen.Program
	var out bytes.Buffer
	res := run(t, fakeGPU(c, h200GPU, &adopted, &out))
	if res.Program != compiled.Hash || adopted.Plan.Arch != "sm_80" || strings.Contains(out.String(), "recompiled") {
		t.Fatalf("without the flag: ran %s (arch %s), compiled %s; printed\n%s", res.Program,
			adopted.Plan.Arch, compiled.Hash, out.String())
	}
	out.Reset()
	c.RecompileForDevice = true
	res = run(t, fakeGPU(c, h200GPU, &adopted, &out))
	want := fmt.Sprintf("recompiled for sm_90a (NVIDIA H200): program %s (was %s for a100x1)\n", res.Program,
		compiled.Hash)
	if res.Program == compiled.Hash || adopted.Plan.Arch != "sm_90a" || !strings.HasPrefix(out.String(), want) {
		t.Fatalf("with the flag: ran %s (arch %s); printed\n%s\nwant first\n%s", res.Program, adopted.Plan.Arch,
			out.String(), want)
	}
	if !strings.Contains(out.String(), "program "+res.Program+"\n") {
		t.Errorf("the run does not print the hash it reports:\n%s", out.String())
	}

	// A compiled folder for an H200 whose attention takes tier 2 (head dim 128,
	// bf16), on an A100: refused without the flag, recompiled from graph.lcc
	// with it.
	c = small(t, 1)
	c.Model, c.Precision, c.SeqLen, c.Batch = filepath.Join("..", "testdata", "hf", "hf_llama_gqa_d128_sdpa.onnx"),
		"bf16", 64, 1
	model, err := driver.Load(c.Model, driver.Bindings{SeqLen: int64(c.SeqLen), Batch: int64(c.Batch)})
	if err != nil {
		t.Fatal(err)
	}
	step, err := driver.Compile(model, c.compileOptions())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := driver.WriteOutputs(dir, step); err != nil {
		t.Fatal(err)
	}
	c.Model = filepath.Join(dir, "graph.lcc")
	if _, err := Train(fakeGPU(c, a100GPU, &adopted, &out)); err == nil ||
		!strings.Contains(err.Error(), RecompileFlag) {
		t.Fatalf("an H200 folder on an A100 without the flag: %v", err)
	}
	out.Reset()
	c.RecompileForDevice = true
	res = run(t, fakeGPU(c, a100GPU, &adopted, &out))
	want = fmt.Sprintf("recompiled %s's step for sm_80 (%s): program %s (was %s for h200x1)\n", c.Model,
		a100GPU.Name, res.Program, step.Hash)
	if adopted.Plan.Arch != "sm_80" || !strings.HasPrefix(out.String(), want) {
		t.Fatalf("a folder recompiled: arch %s; printed\n%s\nwant first\n%s", adopted.Plan.Arch, out.String(), want)
	}
	for _, a := range adopted.Attention {
		if a.Tier != 1 {
			t.Errorf("attention node %d: tier %d recompiled for sm_80, want 1", a.Node, a.Tier)
		}
	}
	if len(adopted.Attention) == 0 {
		t.Error("the recompiled step has no attention kernel")
	}
}
