package driver

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/targets"
)

func names(ps []passes.Pass) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name)
	}
	return strings.Join(s, " ")
}

func mustTarget(t *testing.T, name string) targets.Target {
	t.Helper()
	tg, err := targets.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// TestPassOrderNames checks that every pass the order constraints name exists,
// so a renamed pass cannot silently drop a constraint.
func TestPassOrderNames(t *testing.T) {
	for _, c := range passOrder {
		for _, n := range []string{c.a, c.b} {
			if _, ok := passes.Lookup(n); !ok {
				t.Errorf("passOrder names %q, which is not a registered pass", n)
			}
		}
	}
}

// TestPipelineLists checks the pass lists of the main configurations.
func TestPipelineLists(t *testing.T) {
	h200, cpu := mustTarget(t, "h200x1"), targets.Target{Name: "cpu", Arch: targets.ArchCPU}
	dil := AttentionOptions{Mode: "dilated", Segments: []int64{8, 16}, Dilations: []int64{1, 2}}
	for _, tc := range []struct {
		name string
		t    targets.Target
		o    Options
		want string
	}{
		{"step", h200, Options{}, "match-attention match-norms cancel-transposes cse dce insert-loss fuse-cross-entropy dce autodiff " +
			"sum-concats sink-concats cse dce insert-checkpoints dce codegen"},
		{"cpu step", cpu, Options{Loss: "cross-entropy"}, "match-attention match-norms cancel-transposes cse dce insert-loss " +
			"fuse-cross-entropy dce autodiff sum-concats sink-concats cse dce insert-checkpoints dce"},
		{"inference", h200, Options{Loss: "none"}, "match-attention match-norms cancel-transposes cse dce codegen"},
		{"check", h200, Options{Forward: true, Attention: dil}, "match-attention match-norms dilate-attention cancel-transposes cse dce"},
		{"check grads", h200, Options{Objective: &Objective{Loss: "loss"}}, "autodiff"},
		{"check grads sharded", h200, Options{Objective: &Objective{Loss: "loss"}, Ranks: 2,
			ShardMode: passes.ShardRing}, "shard-sequence autodiff all-reduce-gradients"},
		{"sharded dilated", h200, Options{Attention: dil, Ranks: 4, ShardMode: passes.ShardDilated},
			"match-attention match-norms dilate-attention cancel-transposes cse dce insert-loss fuse-cross-entropy dce shard-sequence " +
				"autodiff all-reduce-gradients sum-concats sink-concats cse dce insert-checkpoints dce codegen"},
	} {
		ps, err := Pipeline(tc.t, tc.o)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := names(ps); got != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.name, got, tc.want)
		}
	}
	ps, _ := Pipeline(h200, Options{Attention: dil, Precision: "bf16", Checkpoint: "layers",
		Ranks: 2, ShardMode: passes.ShardDilated, KeepLogits: true})
	d := Describe(ps)
	want := `match-attention
match-norms
dilate-attention segments=8,16 dilations=1,2 offsets=paper
cancel-transposes
cse
dce
insert-loss loss=auto keep-outputs=true
fuse-cross-entropy
dce
shard-sequence ranks=2 mode=dilated
autodiff
all-reduce-gradients ranks=2
sum-concats
sink-concats
cse
dce
insert-checkpoints policy=layers
dce
codegen arch=sm_90a storage=bf16
`
	if d != want {
		t.Errorf("Describe:\n%s\nwant\n%s", d, want)
	}
	// The description is a pipeline the registry builds (as golden tests write
	// them; the registered codegen only names the step), pass for pass.
	lines := strings.Split(strings.TrimSpace(d), "\n")
	parsed, err := passes.ParsePipeline(strings.Join(lines[:len(lines)-1], "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(parsed) + " codegen"; got != names(ps) {
		t.Errorf("parsed back: %s, want %s", got, names(ps))
	}
}

// TestPipelineOrderAlwaysHolds builds the pipeline of every combination of the
// options that add or remove passes and checks each against the constraints
// (Pipeline checks them itself; an error is a bug).
func TestPipelineOrderAlwaysHolds(t *testing.T) {
	n := 0
	for _, tg := range []string{"h200x1", "a100x8", "cpu"} {
		target := targets.Target{Name: "cpu", Arch: targets.ArchCPU}
		if tg != "cpu" {
			target = mustTarget(t, tg)
		}
		for _, l := range []string{"", "auto", "cross-entropy", "model", "none"} {
			for _, mode := range []string{"dense", "dilated"} {
				for _, ranks := range []int{0, 1, 2, 8} {
					for _, fwd := range []bool{false, true} {
						o := Options{Loss: l, Attention: AttentionOptions{Mode: mode}, Ranks: ranks,
							ShardMode: passes.ShardRing, Forward: fwd}
						if _, err := Pipeline(target, o); err != nil {
							t.Errorf("%s %+v: %v", tg, o, err)
						}
						n++
					}
				}
			}
		}
	}
	t.Logf("%d pipelines checked", n)
}

// TestCheckOrder checks that misordered lists are refused, naming both passes.
func TestCheckOrder(t *testing.T) {
	ps, err := Pipeline(mustTarget(t, "h200x1"), Options{Ranks: 2, ShardMode: passes.ShardRing})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckOrder(ps); err != nil {
		t.Fatal(err)
	}
	index := func(ps []passes.Pass, name string, last bool) int {
		at := -1
		for i, p := range ps {
			if p.Name == name && (last || at < 0) {
				at = i
			}
		}
		return at
	}
	for _, tc := range []struct{ a, b, want string }{
		{"fuse-cross-entropy", "autodiff", "fuse-cross-entropy must run before"},
		{"shard-sequence", "autodiff", "shard-sequence must run before autodiff"},
		{"autodiff", "all-reduce-gradients", "autodiff must run before all-reduce-gradients"},
		{"insert-checkpoints", "codegen", "insert-checkpoints must run before codegen"},
		{"cancel-transposes", "autodiff", "cancel-transposes must run before autodiff"},
		{"match-norms", "insert-loss", ""}, // no constraint between them
	} {
		bad := append([]passes.Pass(nil), ps...)
		i, j := index(bad, tc.a, false), index(bad, tc.b, false)
		bad[i], bad[j] = bad[j], bad[i]
		err := CheckOrder(bad)
		if tc.want == "" {
			if err != nil {
				t.Errorf("swap %s, %s: %v", tc.a, tc.b, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("swap %s, %s: %v, want %q", tc.a, tc.b, err, tc.want)
		}
	}
	// CSE after checkpointing would merge the recomputed copies back.
	late := append(append([]passes.Pass(nil), ps...), passes.EliminateCommonSubexpressions)
	if err := CheckOrder(late); err == nil || !strings.Contains(err.Error(), "cse must run before insert-checkpoints") {
		t.Errorf("cse after insert-checkpoints: %v", err)
	}
}

func TestPipelineBadOptions(t *testing.T) {
	h200 := mustTarget(t, "h200x1")
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Loss: "mse"}, `--loss "mse"`},
		{Options{Precision: "fp8"}, `--precision "fp8"`},
		{Options{Checkpoint: "some"}, `--checkpoint "some"`},
		{Options{MemoryBudget: -1}, "--memory-budget"},
		{Options{Attention: AttentionOptions{Mode: "dense", Segments: []int64{8}}}, "--segments and --dilations need"},
	} {
		if _, err := Pipeline(h200, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// compiledFolder compiles opts.Model with bindings b and writes it as lcc
// compile -o does, returning the result and the folder's graph.lcc.
func compiledFolder(t *testing.T, b Bindings, opts CompileOptions) (*Result, string) {
	t.Helper()
	f, err := Load(opts.Model, b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Compile(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteOutputs(dir, res); err != nil {
		t.Fatal(err)
	}
	return res, filepath.Join(dir, "graph.lcc")
}

// TestCompiledStepSameProgram compiles gpt_mini, writes it, loads graph.lcc back
// and compiles it with the same flags: the program hash must be the same. Other
// flags are refused, since a compiled step cannot be compiled again.
func TestCompiledStepSameProgram(t *testing.T) {
	h200 := mustTarget(t, "h200x1")
	model := filepath.Join("..", "testdata", "onnx", "gpt_mini.onnx")
	opts := CompileOptions{Target: h200, Model: model, Options: Options{Checkpoint: "selective"}}
	res, graph := compiledFolder(t, Bindings{SeqLen: 16}, opts)
	if res.Loss != "loss" || res.Program == nil || len(res.Program.Kernels) == 0 ||
		!strings.HasPrefix(res.Hash, "sha256:") || res.Report.ProgramHash != res.Hash {
		t.Fatalf("loss %q, program %v, hash %q", res.Loss, res.Program != nil, res.Hash)
	}
	g, err := Load(graph, Bindings{})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := CompiledStep(g); !ok || l != "loss" {
		t.Fatalf("CompiledStep = %q, %v", l, ok)
	}
	opts.Model = graph
	again, err := Compile(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash != res.Hash || again.Loss != "loss" {
		t.Errorf("graph.lcc compiles to %s (loss %q), the model to %s", again.Hash, again.Loss, res.Hash)
	}
	// The folder's own program is what runs: read back, not generated again.
	for _, st := range again.Report.Passes {
		if st.Name == "codegen" {
			t.Errorf("codegen ran again for a compiled folder's step")
		}
	}
	if again.Program == nil || !reflect.DeepEqual(again.Program.Kernels, res.Program.Kernels) {
		t.Errorf("the folder's program was not read back whole")
	}
	g, _ = Load(graph, Bindings{})
	opts.Checkpoint = "none"
	if _, err := Compile(g, opts); err == nil || !strings.Contains(err.Error(), "insert-checkpoints policy=selective") {
		t.Errorf("other flags on a compiled step: %v", err)
	}
	// The hash covers the kernels: bf16 storage is another program.
	f, _ := Load(model, Bindings{SeqLen: 16})
	opts.Model, opts.Checkpoint, opts.Precision = model, "selective", "bf16"
	bf, err := Compile(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if bf.Hash == res.Hash || ProgramHash(bf.Func, nil) != ProgramHash(res.Func, nil) {
		t.Errorf("bf16 hash %s, fp32 %s: want different programs over the same IR", bf.Hash, res.Hash)
	}
	// A sharded plan's folder holds rank 0's program: its one-GPU graph.lcc is
	// another program, which lcc train refuses, naming the manifest, rather than
	// run kernels the folder does not hold.
	a100 := mustTarget(t, "a100x8")
	opts = CompileOptions{Target: a100, Model: model, DefaultShard: true}
	sharded, graph := compiledFolder(t, Bindings{SeqLen: 16}, opts)
	if sharded.Sharded == nil {
		t.Fatal("gpt_mini on a100x8 is not sharded")
	}
	g, _ = Load(graph, Bindings{})
	opts.Model, opts.DefaultShard = graph, false
	if _, err := CompileStep(g, opts); err == nil || !strings.Contains(err.Error(), "manifest.json holds program "+sharded.Hash) {
		t.Errorf("a sharded folder's graph.lcc as one GPU's step: %v", err)
	}
}

// TestCompiledStepForDevice: a folder compiled for an A100 (tier-1 attention)
// and recompiled for sm_90a (--recompile-for-device on an H200) generates its kernels
// again, with tier-2 attention, under a hash that is not the manifest's; the
// passes before codegen must still be the recorded ones. Without ForDevice the
// same arch is refused, since the folder does not hold that program.
func TestCompiledStepForDevice(t *testing.T) {
	a100 := mustTarget(t, "a100x1")
	// Head dim 128: the tensor-core tiers take its attention in bf16 storage.
	model := filepath.Join("..", "testdata", "hf", "hf_llama_gqa_d128_sdpa.onnx")
	bf16 := Options{Precision: "bf16"}
	res, graph := compiledFolder(t, Bindings{SeqLen: 128},
		CompileOptions{Target: a100, Model: model, Options: bf16})
	hopper, err := a100.WithArch("sm_90a")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := Load(graph, Bindings{})
	if _, err := CompileStep(g, CompileOptions{Target: hopper, Model: graph, Options: bf16}); err == nil ||
		!strings.Contains(err.Error(), "codegen arch=sm_80") {
		t.Errorf("a compiled folder's step for another arch without ForDevice: %v", err)
	}
	g, _ = Load(graph, Bindings{})
	again, err := CompileStep(g, CompileOptions{Target: hopper, Model: graph, ForDevice: true,
		Options: bf16})
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash == res.Hash || again.Program.Plan.Arch != "sm_90a" {
		t.Fatalf("recompiled for sm_90a: hash %s (the folder's %s), arch %s", again.Hash, res.Hash,
			again.Program.Plan.Arch)
	}
	for _, a := range res.Program.Attention {
		if a.Tier != 1 {
			t.Errorf("attention node %d: tier %d for a100x1, want 1", a.Node, a.Tier)
		}
	}
	if len(again.Program.Attention) == 0 {
		t.Fatal("the recompiled step has no attention kernel")
	}
	for _, a := range again.Program.Attention {
		if a.Tier != 2 {
			t.Errorf("attention node %d: tier %d after the recompile for sm_90a, want 2", a.Node, a.Tier)
		}
	}
	g, _ = Load(graph, Bindings{})
	opts := CompileOptions{Target: hopper, Model: graph, ForDevice: true,
		Options: Options{Checkpoint: "none", Precision: "bf16"}}
	if _, err := CompileStep(g, opts); err == nil || !strings.Contains(err.Error(), "insert-checkpoints") {
		t.Errorf("a recompile for the device with other passes: %v", err)
	}
}
