package driver_test

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/driver/drivertest"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// fuseModels are the steps the fusion tests compile: llama_mini's (the ONNX
// importer's layout) and the flagship's small configuration.
var fuseModels = []string{"llama_mini", "flagship"}

// fuseStep compiles model's training step for the h200x1 target with o (the
// loss and a step without checkpoints).
func fuseStep(t *testing.T, model string, o driver.Options) *driver.Result {
	t.Helper()
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	var f *ir.Func
	switch model {
	case "llama_mini":
		f, err = driver.Load(filepath.Join("..", "testdata", "onnx", "llama_mini.onnx"),
			driver.Bindings{SeqLen: 16, Batch: 2})
	default:
		f, err = llamagen.Build(drivertest.FlagshipSteps["fused"])
	}
	if err != nil {
		t.Fatal(err)
	}
	o.Loss = "cross-entropy"
	if o.Checkpoint == "" {
		o.Checkpoint = "none"
	}
	res, err := driver.Compile(f, driver.CompileOptions{Target: tg, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	if res.Program == nil {
		t.Fatalf("%s: no program: %s", model, res.Report.KernelError)
	}
	return res
}

// stepInputs draws a step's inputs: normal floats, token ids and labels below
// 64 (both models' vocabularies are larger).
func stepInputs(f *ir.Func) map[string]*tensor.Tensor {
	return drivertest.RandomInputs(f, rand.New(rand.NewPCG(5, 6)), 64)
}

// launches counts a program's kernel launches.
func launches(p *cudagen.Program) int {
	n := 0
	for _, s := range p.Plan.Steps {
		if s.Kind == "kernel" {
			n++
		}
	}
	return n
}

// Issue 25: fuse on a training step changes no bit of the loss or of any
// gradient on the CPU interpreter (f32, rounding after every op as a step
// runs), and leaves fewer nodes and fewer kernel launches.
func TestFuseTrainingStepBitIdentical(t *testing.T) {
	for _, tc := range []struct{ model, checkpoint string }{
		{"llama_mini", "none"}, {"flagship", "none"},
		// fuse runs after checkpointing: recomputed forward values and offload
		// and prefetch markers are in the step it fuses.
		{"llama_mini", "layers"}, {"flagship", "sublayers+offload"},
	} {
		model := tc.model
		t.Run(model+"/"+tc.checkpoint, func(t *testing.T) {
			res := fuseStep(t, model, driver.Options{Checkpoint: tc.checkpoint})
			f := res.Func
			g := f.Clone()
			fr, err := passes.Fuse(g, passes.FuseConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if fr.NodesAfter >= fr.NodesBefore || len(fr.Groups) == 0 {
				t.Fatalf("fuse: %d groups, %d nodes → %d", len(fr.Groups), fr.NodesBefore, fr.NodesAfter)
			}
			in := stepInputs(f)
			want, err := interp.Run(f, in, interp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := interp.Run(g, in, interp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			grads := 0
			for name, w := range want {
				gt := got[name]
				for i := range w.F {
					if math.Float64bits(gt.F[i]) != math.Float64bits(w.F[i]) {
						t.Fatalf("output %q element %d: %v fused, %v unfused", name, i, gt.F[i], w.F[i])
					}
				}
				if strings.HasPrefix(name, "grad.") {
					grads++
				}
			}
			if grads == 0 {
				t.Fatal("the step has no gradients")
			}
			fused, err := cudagen.Build(g, cudagen.Options{Arch: "sm_90a"})
			if err != nil {
				t.Fatal(err)
			}
			ops := 0
			for _, gr := range fr.Groups {
				ops += len(gr.Ops)
			}
			t.Logf("%s: %d groups of %d ops; nodes %d → %d; kernel launches %d → %d; %d outputs identical",
				model, len(fr.Groups), ops, fr.NodesBefore, fr.NodesAfter, launches(res.Program), launches(fused),
				len(want))
			if launches(fused) > launches(res.Program) {
				t.Errorf("fusion added launches: %d → %d", launches(res.Program), launches(fused))
			}
		})
	}
}

// --fuse=on compiles the same bytes twice (IR, kernels, hash), a hash of its
// own, and a report that lists the groups; the pipeline shows the row.
func TestFuseCompileDeterministic(t *testing.T) {
	for _, model := range fuseModels {
		t.Run(model, func(t *testing.T) {
			a := fuseStep(t, model, driver.Options{Fuse: "on"})
			b := fuseStep(t, model, driver.Options{Fuse: "on"})
			off := fuseStep(t, model, driver.Options{})
			if ir.Print(a.Func) != ir.Print(b.Func) {
				t.Error("two fused compiles print different IR")
			}
			if len(a.Program.Kernels) != len(b.Program.Kernels) {
				t.Fatalf("%d kernels, then %d", len(a.Program.Kernels), len(b.Program.Kernels))
			}
			for i, k := range a.Program.Kernels {
				if k.Source != b.Program.Kernels[i].Source {
					t.Errorf("kernel %d (%s) differs between two compiles", i, k.Name)
				}
			}
			if a.Hash != b.Hash || a.Hash == off.Hash {
				t.Errorf("hashes: fused %s and %s, unfused %s", a.Hash, b.Hash, off.Hash)
			}
			fu := a.Report.Fusion
			if fu == nil || len(fu.Groups) == 0 || off.Report.Fusion != nil {
				t.Fatalf("report fusion %+v (unfused: %+v)", fu, off.Report.Fusion)
			}
			if a.Report.Ops["fused_elementwise"] != len(fu.Groups) {
				t.Errorf("%d fused_elementwise nodes, %d groups reported", a.Report.Ops["fused_elementwise"],
					len(fu.Groups))
			}
			if !strings.Contains(driver.Describe(a.Pipeline), "\nfuse max-ops=32\ncodegen") ||
				strings.Contains(driver.Describe(off.Pipeline), "\nfuse ") {
				t.Errorf("pipelines:\n%s\n%s", driver.Describe(a.Pipeline), driver.Describe(off.Pipeline))
			}
			if !a.Program.Plan.Fused || off.Program.Plan.Fused {
				t.Error("the launch plan does not record --fuse")
			}
			t.Logf("%s: %d groups, kernel launches %d → %d, about %d bytes of traffic saved", model,
				len(fu.Groups), launches(off.Program), launches(a.Program), fu.SavedBytes())
		})
	}
}

// --fuse takes on or off.
func TestFuseFlag(t *testing.T) {
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := driver.Pipeline(tg, driver.Options{Fuse: "maybe"}); err == nil ||
		!strings.Contains(err.Error(), `--fuse "maybe": want on or off`) {
		t.Errorf("--fuse=maybe: %v", err)
	}
}
