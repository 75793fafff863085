package driver

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

const td = "../testdata"

// prepared loads a model bound to a reference's shapes and runs Prepare.
func prepared(t *testing.T, model, refName string, a AttentionOptions) (*ir.Func, *safetensors.File, string) {
	t.Helper()
	refPath := filepath.Join(td, "ref", refName)
	ref, shapes, err := ReadRef(refPath)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load(filepath.Join(td, "onnx", model), Bindings{InputShapes: shapes})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(f, a, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	return f, ref, refPath
}

func TestShardedAttnMHARing(t *testing.T) {
	for _, mode := range []string{"ring", "ulysses"} {
		for _, n := range []int{2, 4} {
			f, ref, refPath := prepared(t, "attn_mha.onnx", "attn_mha_dense.ref.safetensors", AttentionOptions{})
			var out bytes.Buffer
			_, err := CheckSharded(f, ref, refPath, ShardOptions{Ranks: n, Mode: mode, Grads: true},
				CheckOptions{Tolerance: 1e-4, Out: &out})
			t.Logf("%s N=%d\n%s", mode, n, out.String())
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// f64Ref runs f unsharded in float64 on inputs and returns a reference file with
// the inputs, the outputs and (with the objective ChooseObjective picks) the loss
// and every weight's gradient: the reference for configurations that no
// framework file covers.
func f64Ref(t *testing.T, f *ir.Func, inputs map[string]*tensor.Tensor) *safetensors.File {
	t.Helper()
	ref := &safetensors.File{Tensors: map[string]*tensor.Tensor{}}
	for k, v := range inputs {
		ref.Tensors[k] = v
	}
	g := f.Clone()
	obj, err := ChooseObjective(g, ref)
	if err != nil {
		t.Fatal(err)
	}
	gf, err := autodiff.Grad(g, autodiff.Options{Loss: obj.Loss, Seeds: obj.Seeds, KeepOutputs: true})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := interp.Run(gf, inputs, interp.Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range outs {
		if f.Output(name) != nil || strings.HasPrefix(name, autodiff.GradPrefix) || name == obj.Loss {
			ref.Tensors[name] = v
		}
	}
	for name := range ref.Tensors {
		ref.Names = append(ref.Names, name)
	}
	slices.Sort(ref.Names)
	return ref
}

// checkSharded runs CheckSharded and returns its worst relative error.
func checkSharded(t *testing.T, f *ir.Func, ref *safetensors.File, n int, mode string) float64 {
	t.Helper()
	var out bytes.Buffer
	r, err := CheckSharded(f, ref, "ref", ShardOptions{Ranks: n, Mode: mode, Grads: true},
		CheckOptions{Tolerance: 1e-4, Out: &out})
	if err != nil {
		t.Fatalf("%s N=%d: %v\n%s", mode, n, err, out.String())
	}
	if len(r.Comparisons) < 3 {
		t.Fatalf("%s N=%d: only %d comparisons\n%s", mode, n, len(r.Comparisons), out.String())
	}
	return r.MaxRelErr
}

// Issue 5's done-when: attn_mha, llama_mini and gpt_mini against PyTorch's
// references, for every rank count the layout allows.
func TestShardedShippedReferences(t *testing.T) {
	for _, c := range []struct {
		model, ref, mode string
		ranks            []int
		att              AttentionOptions
	}{
		{"attn_mha.onnx", "attn_mha_dense.ref.safetensors", "ring", []int{2, 4, 8}, AttentionOptions{}},
		{"attn_mha.onnx", "attn_mha_dense.ref.safetensors", "ulysses", []int{2, 4}, AttentionOptions{}},
		// Segments 8, 16, 32: all local at N=2, w=32 gathered at N=4, w=16 and 32 at N=8.
		{"attn_mha.onnx", "attn_mha_dilated_paper.ref.safetensors", "dilated", []int{2, 4, 8},
			AttentionOptions{Mode: "dilated", Segments: []int64{8, 16, 32}, Dilations: []int64{1, 2, 4}}},
		{"llama_mini.onnx", "llama_mini.ref.safetensors", "ring", []int{2, 4, 8}, AttentionOptions{}},
		{"llama_mini.onnx", "llama_mini.ref.safetensors", "ulysses", []int{2, 4}, AttentionOptions{}},
		{"gpt_mini.onnx", "gpt_mini.ref.safetensors", "ring", []int{2, 4, 8}, AttentionOptions{}},
		{"gpt_mini.onnx", "gpt_mini.ref.safetensors", "ulysses", []int{2, 4}, AttentionOptions{}},
	} {
		for _, n := range c.ranks {
			f, ref, _ := prepared(t, c.model, c.ref, c.att)
			e := checkSharded(t, f, ref, n, c.mode)
			t.Logf("%-16s %-8s N=%d max_rel_err=%.3e", c.model, c.mode, n, e)
		}
	}
}

// refInputs returns the inputs of a shipped reference (no outputs or gradients).
func refInputs(ref *safetensors.File, names ...string) map[string]*tensor.Tensor {
	in := map[string]*tensor.Tensor{}
	for _, n := range names {
		in[n] = ref.Tensors[n]
	}
	return in
}

// Dilated configurations without a PyTorch file, against the unsharded model in
// float64: block offsets, segments that do not tile a rank's share (gathered),
// ragged last segments, w > T, and the LongNet rewrite of whole models.
func TestShardedDilatedFloat64(t *testing.T) {
	for _, c := range []struct {
		model, ref string
		inputs     []string
		segs, dils []int64
		offsets    string
		ranks      []int
	}{
		{"attn_mha.onnx", "attn_mha_dense.ref.safetensors", []string{"x", "dy"},
			[]int64{8, 16, 32}, []int64{1, 2, 4}, "block", []int{2, 4, 8}},
		{"attn_mha.onnx", "attn_mha_dense.ref.safetensors", []string{"x", "dy"},
			[]int64{12, 24, 100}, []int64{1, 2, 4}, "paper", []int{2, 4, 8}},
		{"attn_mha.onnx", "attn_mha_dense.ref.safetensors", []string{"x", "dy"},
			[]int64{4, 40}, []int64{2, 3}, "block", []int{2, 4, 8}},
		{"llama_mini.onnx", "llama_mini.ref.safetensors", []string{"input_ids", "labels"},
			[]int64{4, 8, 16}, []int64{1, 2, 4}, "paper", []int{2, 4, 8}},
		{"gpt_mini.onnx", "gpt_mini.ref.safetensors", []string{"input_ids", "labels"},
			[]int64{4, 8, 16}, []int64{1, 2, 4}, "block", []int{2, 4, 8}},
	} {
		att := AttentionOptions{Mode: "dilated", Segments: c.segs, Dilations: c.dils, Offsets: c.offsets}
		f, shipped, _ := prepared(t, c.model, c.ref, att)
		ref := f64Ref(t, f, refInputs(shipped, c.inputs...))
		for _, n := range c.ranks {
			e := checkSharded(t, f, ref, n, "dilated")
			t.Logf("%-16s w=%v r=%v %s N=%d max_rel_err=%.3e", c.model, c.segs, c.dils, c.offsets, n, e)
		}
	}
}

// gqaModel is one grouped-query attention layer with a sinusoidal position term
// built from range (localized per rank), a learned position table gathered by a
// constant, and an output projection to a vocabulary: x [B,T,d] → logits [B,T,V].
func gqaModel(t *testing.T, b, tl, hq, hkv, hd int64) *ir.Func {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 9))
	w := func(shape ...int64) *tensor.Tensor {
		x := tensor.New(tensor.F32, shape...)
		for i := range x.F {
			x.F[i] = float64(float32(rng.NormFloat64() * 0.3))
		}
		return x
	}
	d, v := hq*hd, int64(24)
	bd := ir.NewBuilder("gqa")
	x := bd.Input("x", ir.T(tensor.F32, b, tl, d))
	pos := bd.Apply1(ir.OpRange, ir.A("start", 0.0, "delta", 1.0, "count", tl, "dtype", tensor.F32))
	freq := bd.Weight("freq", w(1, d))
	sin := bd.Unary(ir.OpSin, bd.Mul(bd.Reshape(pos, tl, 1), freq))
	ids := tensor.New(tensor.I64, tl)
	for i := range ids.I {
		ids.I[i] = int64(i)
	}
	table := bd.Apply1(ir.OpGather, ir.A("axis", int64(0)), bd.Weight("pos", w(tl, d)), bd.Const(ids))
	h := bd.Add(bd.Add(x, sin), table)
	q := bd.Reshape(bd.MatMul(h, bd.Weight("wq", w(d, d)), false, false), b, tl, hq, hd)
	k := bd.Reshape(bd.MatMul(h, bd.Weight("wk", w(d, hkv*hd)), false, false), b, tl, hkv, hd)
	vv := bd.Reshape(bd.MatMul(h, bd.Weight("wv", w(d, hkv*hd)), false, false), b, tl, hkv, hd)
	o, _ := bd.Attention(q, k, vv, true, 1/math.Sqrt(float64(hd)))
	y := bd.MatMul(bd.Reshape(o, b, tl, d), bd.Weight("wo", w(d, v)), false, false)
	bd.Output("logits", y)
	f, err := bd.Build()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Grouped-query attention (kv heads split, or replicated for Ulysses when they do
// not divide), position terms from range and from a gathered table, and a mean
// cross-entropy with ignored labels, against the unsharded model in float64.
func TestShardedGQAFloat64(t *testing.T) {
	const b, tl, hq, hkv, hd = 2, 32, 8, 2, 4
	rng := rand.New(rand.NewPCG(3, 4))
	x := tensor.New(tensor.F32, b, tl, hq*hd)
	for i := range x.F {
		x.F[i] = float64(float32(rng.NormFloat64()))
	}
	labels := tensor.New(tensor.I64, b, tl)
	for i := range labels.I {
		labels.I[i] = rng.Int64N(24)
		if i%7 == 3 {
			labels.I[i] = loss.IgnoreIndex
		}
	}
	in := map[string]*tensor.Tensor{"x": x, "labels": labels}
	for _, c := range []struct {
		mode  string
		att   AttentionOptions
		ranks []int
	}{
		{"ring", AttentionOptions{}, []int{2, 4, 8}},
		{"ulysses", AttentionOptions{}, []int{2, 4, 8}}, // Hkv=2: replicated at N=4, 8
		{"dilated", AttentionOptions{Mode: "dilated", Segments: []int64{4, 16, 32},
			Dilations: []int64{1, 2, 4}, Offsets: "block"}, []int{2, 4, 8}},
	} {
		f := gqaModel(t, b, tl, hq, hkv, hd)
		if _, err := Prepare(f, c.att, passes.Options{VerifyEach: true}); err != nil {
			t.Fatal(err)
		}
		ref := f64Ref(t, f, in)
		for _, n := range c.ranks {
			e := checkSharded(t, f, ref, n, c.mode)
			t.Logf("gqa Hq=%d Hkv=%d %-8s N=%d max_rel_err=%.3e", hq, hkv, c.mode, n, e)
		}
	}
}

// Layouts that cannot split the sequence or the heads are errors that say which
// constraint failed and what would work; nothing runs.
func TestShardedBadLayouts(t *testing.T) {
	for _, c := range []struct {
		mode string
		n    int
		want []string
	}{
		{"ring", 3, []string{"divisible by 2·ranks = 6", "60 or 66", "rank counts that work for 64: 1, 2, 4, 8, 16, 32"}},
		{"ring", 64, []string{"divisible by 2·ranks = 128"}},
		{"ulysses", 8, []string{"4 query heads divisible by --ranks=8", "work: 1, 2, 4"}},
		{"dilated", 3, []string{"divisible by --ranks=3", "63 or 66"}},
		{"sideways", 2, []string{"ring, ulysses or dilated"}},
	} {
		f, ref, refPath := prepared(t, "attn_mha.onnx", "attn_mha_dense.ref.safetensors", AttentionOptions{})
		_, err := CheckSharded(f, ref, refPath, ShardOptions{Ranks: c.n, Mode: c.mode, Grads: true},
			CheckOptions{Tolerance: 1e-4, Out: &bytes.Buffer{}})
		if err == nil {
			t.Errorf("%s N=%d: no error", c.mode, c.n)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s N=%d: error %q does not say %q", c.mode, c.n, err, w)
			}
		}
	}
}

// The million-token plan of issue 5: llama_mini on a100x8, 8-way sharded.
func TestPlanShardedMillionTokens(t *testing.T) {
	tg, err := targets.Lookup("a100x8")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode string
		att  AttentionOptions
	}{{"ring", AttentionOptions{}}, {"ulysses", AttentionOptions{}}, {"dilated", AttentionOptions{Mode: "dilated"}}} {
		f, err := Load(filepath.Join(td, "onnx", "llama_mini.onnx"), Bindings{SeqLen: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		n := 8
		if c.mode == "ulysses" {
			n = 4 // 4 heads
		}
		p, err := PlanSharded(f, CompileOptions{Target: tg,
			Options: Options{Loss: "cross-entropy", Attention: c.att}},
			ShardOptions{Ranks: n, Mode: c.mode})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s N=%d: local T=%d, per-GPU peak %s (fits=%v), comm %s/step/GPU %v", c.mode, n,
			p.LocalSeqLen, report.Bytes(p.Memory.PerGPUPeakBytes), p.Memory.FitsTarget,
			report.Bytes(p.Communication.BytesPerStepPerGPU), p.Communication.ByOp)
		if p.LocalSeqLen != (1<<20)/int64(n) || p.Communication.BytesPerStepPerGPU <= 0 ||
			p.Memory.PerGPUPeakBytes <= 0 {
			t.Errorf("%s: implausible plan %+v", c.mode, p)
		}
	}
}

// TestCompileShardedRankProgram: a sharded compile reports, writes and hashes
// rank 0's program, the one CompileStep builds for rank 0 of the same ranks (as
// lcc train --ranks does): its ring attention kernels and NCCL collectives are
// in the kernel list, DIR/kernels and DIR/launch_plan.json are its own, and
// rank 1's build is another program, which Rank 1 (lcc compile --rank=1) reports.
func TestCompileShardedRankProgram(t *testing.T) {
	tg := mustTarget(t, "a100x8")
	model := filepath.Join(td, "onnx", "llama_mini.onnx")
	load := func() *ir.Func {
		f, err := Load(model, Bindings{SeqLen: 16, Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	o := Options{Ranks: 2, ShardMode: passes.ShardRing}
	res, err := Compile(load(), CompileOptions{Target: tg, Model: model, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	if rep.Sharding == nil || rep.Sharding.Rank != 0 || res.Program == nil || rep.KernelError != "" {
		t.Fatalf("sharding %+v, program %v, kernel error %q", rep.Sharding, res.Program != nil, rep.KernelError)
	}
	var names []string
	for _, k := range rep.Kernels {
		names = append(names, k.Name)
	}
	for _, prefix := range []string{"ring_fwd_", "ring_merge_", "ring_dq_", "ring_dkdv_", "shard_positions_",
		"cublaslt_gemm", "nccl_send_recv", "nccl_all_reduce"} {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, prefix) }) {
			t.Errorf("no %s* in the kernel list %v", prefix, names)
		}
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "attention_grad_dq_") }) {
		t.Errorf("the single-GPU step's attention kernels are listed: %v", names)
	}
	for _, a := range rep.AttentionKernels {
		if a.Op != "ring_attention" && a.Op != "ring_attention_grad" {
			t.Errorf("attention kernel of %s, want the ring's", a.Op)
		}
	}
	if rep.Ops["ring_attention"] != 2 || rep.Ops["all_reduce"] == 0 || rep.Ops["attention"] != 0 {
		t.Errorf("ops %v are not rank 0's program's", rep.Ops)
	}
	if h := ProgramHash(res.Sharded.Func, res.Program); res.Hash != h || rep.ProgramHash != h {
		t.Errorf("hash %s, report %s, rank 0's program %s", res.Hash, rep.ProgramHash, h)
	}
	// The step lcc train --ranks=2 builds on each rank (train.Config.compileOptions).
	step := func(rank int) *Result {
		so := o
		so.SPMD, so.Rank = true, rank
		st, err := CompileStep(load(), CompileOptions{Target: tg, Model: model, Options: so})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if r0 := step(0); r0.Hash != res.Hash {
		t.Errorf("compile reports %s, rank 0 of the training step is %s", res.Hash, r0.Hash)
	}
	r1 := step(1)
	if r1.Hash == res.Hash {
		t.Errorf("rank 1 builds the same program as rank 0 (%s)", r1.Hash)
	}
	// lcc compile --rank=1 is rank 1's program; a rank the plan lacks is an error.
	o1 := o
	o1.Rank = 1
	c1, err := Compile(load(), CompileOptions{Target: tg, Model: model, Options: o1})
	if err != nil || c1.Hash != r1.Hash || c1.Report.Sharding.Rank != 1 {
		t.Errorf("--rank=1: %v: hash %s, rank 1's step %s", err, c1.Hash, r1.Hash)
	}
	for _, bad := range []CompileOptions{
		{Target: tg, Options: Options{Ranks: 2, ShardMode: passes.ShardRing, Rank: 2}},
		{Target: mustTarget(t, "h200x1"), Options: Options{Rank: 1}, DefaultShard: true},
	} {
		if _, err := Compile(load(), bad); err == nil || !strings.Contains(err.Error(), "--rank") {
			t.Errorf("%s, ranks %d, rank %d: %v", bad.Target.Name, bad.Ranks, bad.Rank, err)
		}
	}
	dir := t.TempDir()
	if err := WriteOutputs(dir, res); err != nil {
		t.Fatal(err)
	}
	written, _ := filepath.Glob(filepath.Join(dir, "kernels", "*.cu"))
	var want []string
	for _, k := range res.Program.Kernels {
		want = append(want, filepath.Join(dir, "kernels", k.Name+".cu"))
	}
	slices.Sort(want)
	if !slices.Equal(written, slices.Compact(want)) {
		t.Errorf("DIR/kernels holds %d files, rank 0's program %d kernels", len(written), len(want))
	}
	plan, err := os.ReadFile(filepath.Join(dir, "launch_plan.json"))
	if err != nil || !bytes.Contains(plan, []byte(`"send_recv"`)) {
		t.Errorf("launch_plan.json has no send_recv collective (%v)", err)
	}
}
