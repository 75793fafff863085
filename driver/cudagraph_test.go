package driver

import (
	"strings"
	"testing"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/internal/llamagen"
)

// TestCUDAGraphInProgram: a small llama's step records that it is captured,
// with as many launches as its plan has kernel and GEMM steps, and the report
// says so; --cuda-graph=off is another program (another hash, the same
// kernels); a step with offloaded activations is not captured and says why;
// a bad value is refused naming the flag.
func TestCUDAGraphInProgram(t *testing.T) {
	cfg := llamagen.Config{Dim: 32, Layers: 2, Heads: 2, FFN: 64, Vocab: 64, Batch: 1, SeqLen: 32, Fused: true}
	compile := func(policy, graph string) *Result {
		t.Helper()
		f, err := llamagen.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Compile(f, CompileOptions{Target: h200(t), Options: Options{Loss: "cross-entropy",
			Precision: "bf16", Checkpoint: policy, CUDAGraph: graph}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	on, off := compile("none", ""), compile("none", "off")
	launches := 0
	for _, s := range on.Program.Plan.Steps {
		if s.Kind == "kernel" || s.Kind == "gemm" {
			launches++
		}
	}
	g := on.Program.Plan.Graph
	if !g.Capture || g.Launches != launches || launches == 0 || on.Report.CUDAGraph != g.String() {
		t.Errorf("plan graph %+v, report %q; the plan has %d launches", g, on.Report.CUDAGraph, launches)
	}
	var text strings.Builder
	on.Report.WriteText(&text)
	if !strings.Contains(text.String(), "\ncuda graph captured ") {
		t.Errorf("the text report has no cuda graph line:\n%s", text.String())
	}
	if off.Program.Plan.Graph.Capture || off.Report.CUDAGraph != "not captured: "+cudagen.GraphOff {
		t.Errorf("--cuda-graph=off: %+v, report %q", off.Program.Plan.Graph, off.Report.CUDAGraph)
	}
	if on.Hash == off.Hash || len(on.Program.Kernels) != len(off.Program.Kernels) {
		t.Errorf("on and off: hashes %s and %s, %d and %d kernels", on.Hash, off.Hash,
			len(on.Program.Kernels), len(off.Program.Kernels))
	}
	if again := compile("none", "on"); again.Hash != on.Hash {
		t.Errorf("--cuda-graph=on and the default differ: %s, %s", again.Hash, on.Hash)
	}
	offload := compile("layers+offload", "on")
	if g := offload.Program.Plan.Graph; g.Capture || !strings.Contains(g.Reason, "offloaded activation") {
		t.Errorf("an offloading step: %+v, want it refused for its offload copies", g)
	}
	_, err := Pipeline(h200(t), Options{CUDAGraph: "maybe"})
	if err == nil || !strings.Contains(err.Error(), "--cuda-graph") {
		t.Errorf("--cuda-graph=maybe: %v", err)
	}
}
