package driver

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/internal/llamagen"
)

// TestOptimizerStateInThePlan: --optimizer-state=host moves AdamW's 12 bytes a
// trained parameter from the GPU's planned peak to pinned host memory, beside
// the staging of the gradients and working weights; the launch plan records
// the choice, so the hash differs, and the report says it. auto keeps the
// state on the device while the step fits its budget (the same program as
// device) and moves it to the host when only that fits: then it is the host
// plan. A host budget that cannot hold the state refuses the plan. (The update
// is the CPU's, which stages gradients and weights on the host.)
func TestOptimizerStateInThePlan(t *testing.T) {
	compile := func(state string, budget, host int64) (*Result, error) {
		t.Helper()
		f, err := Load("../testdata/onnx/gpt_mini.onnx", Bindings{SeqLen: 32, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		return Compile(f, CompileOptions{Target: h200(t), Options: Options{Loss: "cross-entropy",
			MemoryBudget: budget, HostMemoryBudget: host, OptimizerState: state, OptimizerUpdate: "cpu"}})
	}
	must := func(state string, budget int64) *Result {
		t.Helper()
		res, err := compile(state, budget, 0)
		if err != nil {
			t.Fatalf("--optimizer-state=%s, budget %d: %v", state, budget, err)
		}
		return res
	}
	dev, host := must("device", 0), must("host", 0)
	d, h := dev.Report.Memory, host.Report.Memory
	n := dev.Report.Params.Trainable
	if d.OptimizerState != "" || d.OptimizerBytes != 12*n {
		t.Fatalf("device: state %q, optimizer %d bytes, want \"\" and %d", d.OptimizerState, d.OptimizerBytes, 12*n)
	}
	if h.OptimizerState != "host" || h.OptimizerBytes != 0 || h.HostStateBytes != 12*n ||
		h.HostStagingBytes != 2*4*n {
		t.Errorf("host: state %q, optimizer %d, host state %d, staging %d; want host, 0, %d, %d",
			h.OptimizerState, h.OptimizerBytes, h.HostStateBytes, h.HostStagingBytes, 12*n, 8*n)
	}
	if h.PerGPUPeakBytes != d.PerGPUPeakBytes-12*n {
		t.Errorf("host: GPU peak %d, want the device plan's %d less %d", h.PerGPUPeakBytes, d.PerGPUPeakBytes, 12*n)
	}
	if want := d.HostPeakBytes + 20*n; h.HostPeakBytes != want || h.PinnedBytes != d.PinnedBytes+20*n {
		t.Errorf("host: host peak %d, pinned %d; want %d, %d", h.HostPeakBytes, h.PinnedBytes, want,
			d.PinnedBytes+20*n)
	}
	if dev.Hash == host.Hash {
		t.Error("device and host plans have one program hash")
	}
	if host.Program.Plan.OptimizerState != "host" || dev.Program.Plan.OptimizerState != "" {
		t.Errorf("launch plans record %q and %q", dev.Program.Plan.OptimizerState, host.Program.Plan.OptimizerState)
	}
	var text bytes.Buffer
	host.Report.WriteText(&text)
	if !strings.Contains(text.String(), "optimizer state: host (pinned)") {
		t.Errorf("the host plan's report does not say where the state is:\n%s", text.String())
	}
	if !strings.Contains(strings.Join(host.Report.Pipeline, "\n"), "optimizer-state=host") {
		t.Errorf("insert-checkpoints' row does not show the state: %q", host.Report.Pipeline)
	}

	// auto: the device while it fits, the host when only that fits.
	if roomy := must("auto", 0); roomy.Hash != dev.Hash || roomy.Report.Memory.OptimizerState != "" {
		t.Errorf("auto without a binding budget: hash %s, state %q; want the device plan's %s",
			roomy.Hash, roomy.Report.Memory.OptimizerState, dev.Hash)
	}
	tight := must("auto", h.PerGPUPeakBytes)
	if tm := tight.Report.Memory; tm.OptimizerState != "host" || tight.Hash != host.Hash {
		t.Errorf("auto under the host plan's peak %d: state %q, peak %d, hash %s; want the host plan (%s)",
			h.PerGPUPeakBytes, tm.OptimizerState, tm.PerGPUPeakBytes, tight.Hash, host.Hash)
	}
	if _, err := compile("host", 0, h.HostPeakBytes-1); err == nil ||
		!strings.Contains(err.Error(), "does not fit the host") {
		t.Errorf("a host budget a byte short of the host plan: %v", err)
	}
	if _, err := compile("cpu", 0, 0); err == nil || !strings.Contains(err.Error(), "--optimizer-state") {
		t.Errorf("--optimizer-state=cpu: %v", err)
	}
}

// TestFlagshipKeepsResidentOptimizer: the flagship at T=4096 (bf16, dense
// attention) fits one H200 with its optimizer state, so auto plans it there:
// the program lcc compile builds without the flag.
func TestFlagshipKeepsResidentOptimizer(t *testing.T) {
	hashes := map[string]string{}
	for _, state := range []string{"", "auto"} {
		res := compileGen(t, llamagen.Flagship(4096), Options{Loss: "cross-entropy", Precision: "bf16",
			OptimizerState: state})
		if m := res.Report.Memory; m.OptimizerState != "" || m.OptimizerBytes == 0 {
			t.Errorf("--optimizer-state=%q: state %q, %d optimizer bytes on the GPU", state, m.OptimizerState,
				m.OptimizerBytes)
		}
		hashes[state] = res.Hash
	}
	if hashes[""] != hashes["auto"] {
		t.Errorf("auto's program %s, the default's %s", hashes["auto"], hashes[""])
	}
}

// TestCompiledStepKeepsOptimizerState: a step compiled with its optimizer
// state on the host and written as lcc compile -o does compiles from its
// graph.lcc to the same program, the state still on the host; the memory is
// the host plan's.
func TestCompiledStepKeepsOptimizerState(t *testing.T) {
	model := filepath.Join("..", "testdata", "onnx", "gpt_mini.onnx")
	opts := CompileOptions{Target: h200(t), Model: model, Options: Options{Loss: "cross-entropy",
		OptimizerState: "host"}}
	res, graph := compiledFolder(t, Bindings{SeqLen: 16}, opts)
	again := recompile(t, graph, opts)
	if again.Hash != res.Hash || again.Report.Memory.OptimizerState != "host" ||
		again.Report.Memory.PerGPUPeakBytes != res.Report.Memory.PerGPUPeakBytes {
		t.Errorf("graph.lcc: hash %s, state %q, peak %d; the model: %s, host, %d", again.Hash,
			again.Report.Memory.OptimizerState, again.Report.Memory.PerGPUPeakBytes, res.Hash,
			res.Report.Memory.PerGPUPeakBytes)
	}
}

// recompile loads a compiled folder's graph.lcc and compiles it again with opts,
// as lcc train DIR/graph.lcc does.
func recompile(t *testing.T, graph string, opts CompileOptions) *Result {
	t.Helper()
	g, err := Load(graph, Bindings{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Model = graph
	again, err := Compile(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	return again
}

// TestOptimizerUpdateInThePlan: --optimizer-update=gpu keeps the host state but drops
// the host's gradient and weight staging, holds the two device windows on the
// GPU (cost.HostStreamBytes, a fixed cost), is recorded in the launch
// plan (another hash) and said in the report; with the state on the device it
// changes nothing.
func TestOptimizerUpdateInThePlan(t *testing.T) {
	compile := func(state, update string) *Result {
		t.Helper()
		f, err := Load("../testdata/onnx/gpt_mini.onnx", Bindings{SeqLen: 32, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Compile(f, CompileOptions{Target: h200(t), Options: Options{Loss: "cross-entropy",
			OptimizerState: state, OptimizerUpdate: update}})
		if err != nil {
			t.Fatalf("--optimizer-state=%s --optimizer-update=%s: %v", state, update, err)
		}
		return res
	}
	cpu, gpu := compile("host", "cpu"), compile("host", "gpu")
	cpuNone := compileWith(t, Options{Loss: "cross-entropy", OptimizerState: "host", OptimizerUpdate: "cpu",
		Checkpoint: "none"})
	if def := compile("host", ""); def.Hash != gpu.Hash {
		t.Errorf("the default update's program %s, the GPU's %s", def.Hash, gpu.Hash)
	}
	// auto under a budget that the CPU's plan fits and the GPU's windows do not,
	// with no checkpoints to make room: the CPU's update. (With checkpoints the
	// auto policy may recompute to make room for the windows.)
	tight := compileWith(t, Options{Loss: "cross-entropy", OptimizerState: "host", OptimizerUpdate: "auto",
		Checkpoint: "none", MemoryBudget: cpuNone.Report.Memory.PerGPUPeakBytes})
	if m := tight.Report.Memory; m.OptimizerUpdate != "" || m.PerGPUPeakBytes != cpuNone.Report.Memory.PerGPUPeakBytes {
		t.Errorf("auto under the CPU plan's peak: update %q, peak %d; want the CPU's, %d", m.OptimizerUpdate,
			m.PerGPUPeakBytes, cpuNone.Report.Memory.PerGPUPeakBytes)
	}
	rows := func(r *Result) string { return strings.Join(r.Report.Pipeline, "\n") }
	if strings.Contains(rows(gpu), "optimizer-update") || !strings.Contains(rows(cpu), "optimizer-update=cpu") ||
		strings.Contains(rows(compile("device", "cpu")), "optimizer-update") {
		t.Errorf("codegen's rows name the update where it is not the default or the state may be on the host:\n"+
			"gpu %s\ncpu %s", rows(gpu), rows(cpu))
	}
	c, g := cpu.Report.Memory, gpu.Report.Memory
	n := cpu.Report.Params.Trainable
	if g.OptimizerState != "host" || g.OptimizerUpdate != "gpu" || c.OptimizerUpdate != "" {
		t.Errorf("reports: cpu %q/%q, gpu %q/%q", c.OptimizerState, c.OptimizerUpdate, g.OptimizerState, g.OptimizerUpdate)
	}
	if g.HostStateBytes != 12*n || g.HostStagingBytes != 0 || g.HostPeakBytes != c.HostPeakBytes-c.HostStagingBytes {
		t.Errorf("gpu update: host state %d, staging %d, host peak %d; want %d, 0, the cpu plan's %d less its staging %d",
			g.HostStateBytes, g.HostStagingBytes, g.HostPeakBytes, 12*n, c.HostPeakBytes, c.HostStagingBytes)
	}
	win := cost.HostStreamBytes(n)
	if win != 24*min(n, cost.HostStreamWindow) || g.FixedBytes != c.FixedBytes+win || g.PerGPUPeakBytes != c.PerGPUPeakBytes+win {
		t.Errorf("gpu update: fixed %d, peak %d; want the cpu plan's %d, %d and the windows' %d", g.FixedBytes,
			g.PerGPUPeakBytes, c.FixedBytes, c.PerGPUPeakBytes, win)
	}
	if gpu.Program.Plan.OptimizerUpdate != "gpu" || cpu.Program.Plan.OptimizerUpdate != "" || gpu.Hash == cpu.Hash {
		t.Errorf("launch plans %q and %q, hashes %s and %s", cpu.Program.Plan.OptimizerUpdate,
			gpu.Program.Plan.OptimizerUpdate, cpu.Hash, gpu.Hash)
	}
	var text bytes.Buffer
	gpu.Report.WriteText(&text)
	if !strings.Contains(text.String(), "the GPU runs AdamW") {
		t.Errorf("the report does not say where the update runs:\n%s", text.String())
	}
	if d, dg := compile("device", "cpu"), compile("device", "gpu"); d.Hash != dg.Hash {
		t.Errorf("with the state on the device, --optimizer-update changed the program: %s, %s", d.Hash, dg.Hash)
	}
}

// compileWith compiles gpt_mini at 32 tokens for the H200 with o.
func compileWith(t *testing.T, o Options) *Result {
	t.Helper()
	f, err := Load("../testdata/onnx/gpt_mini.onnx", Bindings{SeqLen: 32, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Compile(f, CompileOptions{Target: h200(t), Options: o})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
