package driver

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// TestExactZeroGrads: a bias that reaches attention's keys only through the add
// that applies it, a head split and transposes is zero in exact arithmetic; one
// rotated on the way (RoPE's multiply), one on the queries and one on the values
// are not.
func TestExactZeroGrads(t *testing.T) {
	b := ir.NewBuilder("z")
	x := b.Input("x", ir.T(tensor.F32, 2, 8, 16))
	heads := func(name string, rotate bool) *ir.Value {
		y := b.Add(b.MatMul(x, b.Weight(name+".weight", tensor.New(tensor.F32, 16, 16)), false, false),
			b.Weight(name+".bias", tensor.New(tensor.F32, 16)))
		h := b.Transpose(b.Reshape(y, 2, 8, 4, 4), 0, 2, 1, 3) // [B, H, S, D] as exporters lay it out
		if rotate {
			h = b.Mul(h, b.Input(name+".cos", ir.T(tensor.F32, 1, 1, 8, 4)))
		}
		return b.Transpose(h, 0, 2, 1, 3)
	}
	o, _ := b.Attention(heads("q", false), heads("k", false), heads("v", false), true, 0.5)
	o2, _ := b.Attention(heads("q2", false), heads("k2", true), heads("v2", false), true, 0.5)
	b.Output("o", b.Add(o, o2))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p := range exactZeroGrads(f) {
		got = append(got, p.Name)
	}
	if strings.Join(got, " ") != "k.bias" {
		t.Errorf("exactly zero: %v, want [k.bias]", got)
	}
}

// TestStructuralZeroFloor: a bf16 run is held to the CPU's emulation of it, and
// on a gradient that is zero in exact arithmetic both hold only their own
// rounding noise. BERT's key biases get the storage's floor from the graph's
// structure, even where the reference's f32 noise on them (1e-5 of the largest
// gradient here, as in deeper models) is too large for the floor from REF's norm
// (1e-6) to apply: the device's noise (5e-5 here) passes, at 1.3e-2 of the floor;
// without the floor it would be measured against the emulation's own noise.
func TestStructuralZeroFloor(t *testing.T) {
	const model = "../testdata/hf/hf_bert"
	f, rf := preparedWithRef(t, model)
	const key = "encoder.layer.0.attention.self.key.bias"
	largest := 0.0
	for _, k := range rf.Names {
		if strings.HasPrefix(k, "grad.") {
			largest = max(largest, norm(rf.Tensors[k]))
		}
	}
	noise := func(t *tensor.Tensor, size float64) *tensor.Tensor {
		t = t.Clone()
		for i := range t.F {
			t.F[i] += size * largest / 8 * float64(1-2*(i%2)) // 64 entries: norm size·largest
		}
		return t
	}
	rf.Tensors["grad."+key] = noise(rf.Tensors["grad."+key], 1e-5)
	opts := CheckOptions{Tolerance: 2e-2, Out: &bytes.Buffer{}, Storage: tensor.BF16}
	opts.Run = func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
		outs, err := RunCPU(f, in, tensor.BF16, HostBudget{})
		if err == nil {
			outs["grad.m."+key] = noise(outs["grad.m."+key], 5e-5)
		}
		return outs, err
	}
	if _, err := CheckGrads(f, rf, model, opts); err != nil {
		t.Fatalf("%v\n%s", err, opts.Out)
	}
	if out := opts.Out.(*bytes.Buffer).String(); !strings.Contains(out, "grad."+key+" (as m."+key+
		") (zero in exact arithmetic") {
		t.Errorf("the key bias is not reported zero in exact arithmetic:\n%s", out)
	}
}

// preparedWithRef loads MODEL.onnx bound to MODEL.ref.safetensors's inputs, as
// lcc check does, and returns it prepared with the reference.
func preparedWithRef(t *testing.T, model string) (*ir.Func, *safetensors.File) {
	t.Helper()
	rf, shapes, err := ReadRef(model + ".ref.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load(model+".onnx", Bindings{InputShapes: shapes, InputValues: rf.Tensors})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(f, AttentionOptions{}, passes.Options{}); err != nil {
		t.Fatal(err)
	}
	return f, rf
}
