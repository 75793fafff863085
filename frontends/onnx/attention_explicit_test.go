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
	"github.com/lcc-dev/lcc/passes/autodiff/gradcheck"
	"github.com/lcc-dev/lcc/tensor"
)

// explicitAttentionModel is one opset-23 Attention node with everything the fused
// op lacks: grouped queries (4 heads over 2), a KV cache of 2 past steps, softcap,
// causal masking plus a bool mask that hides query row 0 of batch 1 entirely, and
// all four outputs (output 3 the softmax, mode 3). Q, K, V and the cache are f64
// initializers, so they are weights whose gradients can be checked.
func explicitAttentionModel(r *rand.Rand) *onnxpb.ModelProto {
	const b, hq, hkv, tq, past, d = 2, 4, 2, 3, 2, 4
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
	// mask [b, 1, tq, past+tq]: all true but batch 1's query row 0.
	mask := make([]byte, b*tq*(past+tq))
	for i := range mask {
		mask[i] = 1
	}
	for j := 0; j < past+tq; j++ {
		mask[tq*(past+tq)+j] = 0
	}
	at := func(name string, typ onnxpb.AttributeProto_AttributeType, set func(a *onnxpb.AttributeProto)) *onnxpb.AttributeProto {
		a := &onnxpb.AttributeProto{Name: proto.String(name), Type: typ.Enum()}
		set(a)
		return a
	}
	n := node("attn", "Attention", []string{"Q", "K", "V", "mask", "past_k", "past_v"},
		[]string{"Y", "present_k", "present_v", "qk"})
	n.Attribute = []*onnxpb.AttributeProto{
		at("is_causal", onnxpb.AttributeProto_INT, func(a *onnxpb.AttributeProto) { a.I = proto.Int64(1) }),
		at("softcap", onnxpb.AttributeProto_FLOAT, func(a *onnxpb.AttributeProto) { a.F = proto.Float32(2) }),
		at("qk_matmul_output_mode", onnxpb.AttributeProto_INT, func(a *onnxpb.AttributeProto) { a.I = proto.Int64(3) }),
	}
	dbl := onnxpb.TensorProto_DOUBLE
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(23)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("attn"),
			Node: []*onnxpb.NodeProto{n},
			Initializer: []*onnxpb.TensorProto{
				f64("Q", b, hq, tq, d), f64("K", b, hkv, tq, d), f64("V", b, hkv, tq, d),
				f64("past_k", b, hkv, past, d), f64("past_v", b, hkv, past, d),
				rawTensor("mask", onnxpb.TensorProto_BOOL, []int64{b, 1, tq, past + tq}, mask),
			},
			Output: []*onnxpb.ValueInfoProto{
				valueInfo("Y", tensorType(dbl, b, hq, tq, d)),
				valueInfo("present_k", tensorType(dbl, b, hkv, past+tq, d)),
				valueInfo("present_v", tensorType(dbl, b, hkv, past+tq, d)),
				valueInfo("qk", tensorType(dbl, b, hq, tq, past+tq)),
			},
		},
	}
}

// TestExplicitAttention checks the explicit lowering's numbers against a direct
// loop, and its gradients (through softcap, the cache concat, head repetition
// and the fully hidden row) against finite differences.
func TestExplicitAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, err := Decode(marshal(t, explicitAttentionModel(r)), "", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Import(m, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Body {
		if n.Op == ir.OpAttention {
			t.Fatal("lowered to the fused attention op")
		}
	}
	outs, err := interp.Run(f, nil, interp.Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph.Initializers
	q, kp, vp, pk, pv := g["Q"], g["K"], g["V"], g["past_k"], g["past_v"]
	const b, hq, hkv, tq, past, d = 2, 4, 2, 3, 2, 4
	const tk = past + tq
	kv := func(cache, cur *tensor.Tensor, bi, h, j, e int64) float64 {
		if j < past {
			return cache.F[((bi*hkv+h)*past+j)*d+e]
		}
		return cur.F[((bi*hkv+h)*tq+j-past)*d+e]
	}
	for bi := int64(0); bi < b; bi++ {
		for h := int64(0); h < hq; h++ {
			for i := int64(0); i < tq; i++ {
				hidden := bi == 1 && i == 0
				s := make([]float64, tk)
				mx := math.Inf(-1)
				for j := int64(0); j < tk; j++ {
					var dot float64
					for e := int64(0); e < d; e++ {
						dot += q.F[((bi*hq+h)*tq+i)*d+e] * kv(pk, kp, bi, h/2, j, e)
					}
					s[j] = 2 * math.Tanh(dot/math.Sqrt(d)/2)
					if j > i+past || hidden {
						s[j] = math.Inf(-1)
					}
					mx = math.Max(mx, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				for j := int64(0); j < tk; j++ {
					p := s[j] / sum
					if hidden {
						p = 0
					}
					if got := outs["qk"].F[((bi*hq+h)*tq+i)*tk+j]; math.Abs(got-p) > 1e-12 {
						t.Fatalf("qk[%d,%d,%d,%d] = %g, want %g", bi, h, i, j, got, p)
					}
				}
				for e := int64(0); e < d; e++ {
					var y float64
					for j := int64(0); j < tk; j++ {
						if !hidden {
							y += s[j] / sum * kv(pv, vp, bi, h/2, j, e)
						}
					}
					if got := outs["Y"].F[((bi*hq+h)*tq+i)*d+e]; math.Abs(got-y) > 1e-12 {
						t.Fatalf("Y[%d,%d,%d,%d] = %g, want %g", bi, h, i, e, got, y)
					}
				}
			}
		}
	}
	seed := func(name string) *tensor.Tensor {
		o := f.Output(name).Type
		x := tensor.New(tensor.F64, o.Shape...)
		for i := range x.F {
			x.F[i] = r.NormFloat64()
		}
		return x
	}
	res, err := gradcheck.Check(f, map[string]*tensor.Tensor{}, gradcheck.Objective{Seeds: map[string]*tensor.Tensor{
		"Y": seed("Y"), "present_k": seed("present_k"), "qk": seed("qk")}}, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 {
		t.Errorf("checked %d weights, want 5 (Q, K, V and the cache)", len(res))
	}
	for _, p := range res {
		if p.RelErr > 1e-6 || math.IsNaN(p.RelErr) {
			t.Errorf("d/d %s: relative error %.3g", p.Param, p.RelErr)
		}
	}
}
