package driver

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// TestStoredAs: with bf16 storage the CPU rounds what the GPU stores in bf16 and
// nothing else: parameters, a matmul's result, a fused elementwise kernel's
// output; not the value inside the fused kernel (a register), nor attention's
// lse (kept f32 for the backward's exp(s − lse)).
func TestStoredAs(t *testing.T) {
	b := ir.NewBuilder("s")
	x := b.Input("x", ir.T(tensor.F32, 1, 4, 2, 8))
	w := b.Weight("w", tensor.New(tensor.F32, 8, 8))
	m := b.MatMul(x, w, false, false)
	e := b.Unary(ir.OpExp, m)
	y := b.Add(e, x)
	o, lse := b.Attention(y, y, y, true, 0.25)
	b.Output("o", o)
	b.Output("lse", lse)
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	store, err := storedAs(f, tensor.BF16)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		v    *ir.Value
		want tensor.DType
	}{{"x", x, tensor.BF16}, {"w", w, tensor.BF16}, {"matmul", m, tensor.BF16}, {"exp (in registers)", e, tensor.F32},
		{"add", y, tensor.BF16}, {"attention o", o, tensor.BF16}, {"attention lse", lse, tensor.F32}} {
		if got := store(c.v); got != c.want {
			t.Errorf("%s: stored as %v, want %v", c.name, got, c.want)
		}
	}
	if store, err := storedAs(f, tensor.F32); store != nil || err != nil {
		t.Errorf("f32 storage: got a Store function (err %v), want nil", err)
	}
}

// TestCheckBF16Emulated: `lcc check --precision=bf16` holds the run to the CPU
// interpreter storing the same values in bf16, and reports the error against
// REF beside it. On the head-dim-128 model, bf16 storage alone, without any GPU
// kernel, is 2.8e-2 from REF (PyTorch in f32), beyond the 2e-2 that
// docs/design.md §8 sets for bf16 kernels: the whole model's bf16 error is its
// depth and conditioning, not a pathological input (random token ids and labels
// of seeds 1-4 give 2.0-2.1e-2), and the GPU's bf16 runs measured the same
// (2.3e-2 with the flash kernels, 2.7e-2 with the scalar ones, BENCHMARKS.md), so
// REF cannot be what a bf16 run is held to. A run that is off where the
// emulation is not (5% on one gradient) still fails.
func TestCheckBF16Emulated(t *testing.T) {
	const model = "../testdata/hf/hf_llama_gqa_d128_sdpa"
	f, rf := preparedWithRef(t, model)
	var out bytes.Buffer
	opts := CheckOptions{Tolerance: 2e-2, Out: &out, Storage: tensor.BF16}
	res, err := CheckGrads(f, rf, model, opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	maxRef := 0.0
	for _, c := range res.Comparisons {
		if !c.HasRef || c.RelErr != 0 {
			t.Errorf("%s: rel_err %g has_ref %v: want 0 against itself, REF's error beside", c.Name, c.RelErr, c.HasRef)
		}
		maxRef = max(maxRef, c.RefRelErr)
	}
	if maxRef < 2e-2 || maxRef > 4e-2 || !strings.Contains(out.String(), "max_ref_rel_err=") {
		t.Errorf("bf16 storage against REF: %.3e, want 2e-2 to 4e-2 (the reason the check compares with the "+
			"emulation), printed as max_ref_rel_err:\n%s", maxRef, out.String())
	}
	// A device that differs from the emulation by 5% on one gradient.
	const bad = "grad.m.model.layers.1.mlp.up_proj.weight"
	opts.Run = offBy5Percent(func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
		return RunCPU(f, in, tensor.BF16, HostBudget{})
	}, bad)
	opts.Out = &bytes.Buffer{}
	_, err = CheckGrads(f, rf, model, opts)
	if !errors.Is(err, ErrTolerance) || !strings.Contains(err.Error(), "up_proj") {
		t.Errorf("a 5%% error on %s: got %v, want ErrTolerance naming it", bad, err)
	}
}

// offBy5Percent is a device that runs as run does but returns output bad 5%
// larger: an error beyond bf16's 2e-2 tolerance, which a check must catch
// whatever else it forgives.
func offBy5Percent(run Runner, bad string) Runner {
	return func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
		outs, err := run(f, in)
		if err != nil {
			return nil, err
		}
		g := outs[bad].Clone()
		for i := range g.F {
			g.F[i] *= 1.05
		}
		outs[bad] = g
		return outs, nil
	}
}

// TestLossStoredF32: under bf16 storage the training step's loss stays f32 on the
// device (and so in the CPU's emulation of it): lcc train prints and records it
// unrounded, not 10.5, 9.25, 7.5625.
func TestLossStoredF32(t *testing.T) {
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load("../testdata/onnx/gpt_mini.onnx", Bindings{SeqLen: 16, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	st, err := CompileStep(f, CompileOptions{Target: tg, Options: Options{Precision: "bf16", Loss: "auto"}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := storedAs(st.Func, tensor.BF16)
	if err != nil {
		t.Fatal(err)
	}
	loss := st.Func.Output(st.Loss)
	if loss == nil || store(loss) != tensor.F32 {
		t.Fatalf("loss %q stored as %v, want f32", st.Loss, store(loss))
	}
	in := map[string]*tensor.Tensor{}
	for _, p := range st.Func.Params {
		if p.Data != nil {
			in[p.Name] = p.Data
		} else if p.Role == ir.RoleInput || p.Role == ir.RoleLabel {
			ids := tensor.New(tensor.I64, p.Value.Type.Shape...)
			for i := range ids.I {
				ids.I[i] = int64(i*7) % 512
			}
			in[p.Name] = ids
		}
	}
	out, err := interp.Run(st.Func, in, interp.Options{Precision: tensor.F32, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	l := out[st.Loss].F[0]
	if r := float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(l)))); r == l {
		t.Errorf("loss %v is a bf16 number: rounded to bf16 storage", l)
	}
}
