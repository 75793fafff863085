package onnx

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// windowAttentionModel is one Attention node over f64 initializers, 4 query heads
// over 2 kv heads of 6 tokens, [B,H,T,D] (rank 4) or [B,T,H·D] (rank 3), with the
// given window attributes (−1: absent), optionally a bool attn_mask, and with the
// scores as a second output when explicit is set, which forces the explicit
// lowering (the fused op has no such output).
func windowAttentionModel(rank int, causal, left, right int64, mask, explicit bool) *onnxpb.ModelProto {
	const b, hq, hkv, t, d = 2, 4, 2, 6, 4
	r := rand.New(rand.NewPCG(5, 6))
	f64 := func(name string, dims ...int64) *onnxpb.TensorProto {
		n := int64(1)
		for _, x := range dims {
			n *= x
		}
		raw := make([]byte, 8*n)
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(r.NormFloat64()))
		}
		return rawTensor(name, onnxpb.TensorProto_DOUBLE, dims, raw)
	}
	qd, kd := []int64{b, hq, t, d}, []int64{b, hkv, t, d}
	y := tensorType(onnxpb.TensorProto_DOUBLE, b, hq, t, d)
	if rank == 3 {
		qd, kd = []int64{b, t, hq * d}, []int64{b, t, hkv * d}
		y = tensorType(onnxpb.TensorProto_DOUBLE, b, t, hq*d)
	}
	ins := []string{"Q", "K", "V"}
	inits := []*onnxpb.TensorProto{f64("Q", qd...), f64("K", kd...), f64("V", kd...)}
	if mask {
		// Every key but the first visible: no row is hidden entirely.
		m := make([]byte, t*t)
		for i := range m {
			m[i] = byte(min(i%t, 1))
		}
		ins = append(ins, "mask")
		inits = append(inits, rawTensor("mask", onnxpb.TensorProto_BOOL, []int64{t, t}, m))
	}
	outs := []string{"Y"}
	outInfo := []*onnxpb.ValueInfoProto{valueInfo("Y", y)}
	if explicit {
		outs = append(outs, "", "", "qk")
		outInfo = append(outInfo, valueInfo("qk", tensorType(onnxpb.TensorProto_DOUBLE, b, hq, t, t)))
	}
	n := node("attn", "Attention", ins, outs)
	set := func(name string, v int64) {
		if v >= 0 {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String(name),
				Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)})
		}
	}
	set("is_causal", causal)
	set("left_window_size", left)
	set("right_window_size", right)
	if rank == 3 {
		set("q_num_heads", hq)
		set("kv_num_heads", hkv)
	}
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(23)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("attn"), Node: []*onnxpb.NodeProto{n},
			Initializer: inits, Output: outInfo},
	}
}

// TestAttentionWindow: a causal Attention with left_window_size = L lowers to the
// fused op with window = L + 1 (none when no key falls outside it), and computes
// what the explicit lowering computes; window attributes the op does not take that
// way (not causal, with attn_mask) keep the explicit lowering.
func TestAttentionWindow(t *testing.T) {
	for _, c := range []struct {
		name        string
		rank        int
		causal      int64
		left, right int64
		mask        bool
		want        int64 // the fused op's window; −1: no fused op
	}{
		{"left 2", 4, 1, 2, -1, false, 3},
		{"left 2, right 0", 4, 1, 2, 0, false, 3},
		{"left 2, right 3 (causal hides it)", 4, 1, 2, 3, false, 3},
		{"left 0: the query alone", 4, 1, 0, -1, false, 1},
		{"left 4: window 5 of 6", 4, 1, 4, -1, false, 5},
		{"left 5: plain causal", 4, 1, 5, -1, false, 0},
		{"right only: plain causal", 4, 1, -1, 1, false, 0},
		{"3-D, grouped", 3, 1, 1, -1, false, 2},
		{"not causal", 4, 0, 2, -1, false, -1},
		{"with attn_mask", 4, 1, 2, -1, true, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(explicit bool) (*ir.Func, *tensor.Tensor) {
				m, err := Decode(marshal(t, windowAttentionModel(c.rank, c.causal, c.left, c.right, c.mask,
					explicit)), "", LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				f, err := Import(m, ImportOptions{})
				if err != nil {
					t.Fatal(err)
				}
				outs, err := interp.Run(f, nil, interp.Options{Precision: tensor.F64})
				if err != nil {
					t.Fatal(err)
				}
				return f, outs["Y"]
			}
			f, got := run(false)
			ref, want := run(true)
			window := int64(-1)
			for _, n := range f.Body {
				if n.Op == ir.OpAttention {
					window = ir.Window(n)
				}
			}
			if window != c.want {
				t.Errorf("window %d, want %d:\n%s", window, c.want, ir.Print(f))
			}
			for _, n := range ref.Body {
				if n.Op == ir.OpAttention {
					t.Fatalf("the reference lowered to the fused op:\n%s", ir.Print(ref))
				}
			}
			for i := range want.F {
				if d := math.Abs(got.F[i] - want.F[i]); !(d <= 1e-12*(1+math.Abs(want.F[i]))) {
					t.Fatalf("Y[%d] = %v, the explicit lowering gives %v", i, got.F[i], want.F[i])
				}
			}
		})
	}
}
