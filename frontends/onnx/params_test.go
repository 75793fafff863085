package onnx

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/safetensors"
)

// TestWeightsArePyTorchParameters imports every PyTorch export in testdata and
// checks that its trainable weights are exactly the model's parameters, by name
// and size, as the reference lists them (REF "grad.<name>" holds one gradient
// per entry of PyTorch's named_parameters()). The exporter's constants (RoPE
// frequencies, scales) are not weights; parameters it merged (equal LayerNorm
// scales) or folded (Linear's Wᵀ, GPT-2's zero biases) are weights again.
func TestWeightsArePyTorchParameters(t *testing.T) {
	cases := []struct{ model, ref string }{
		{"onnx/gpt_mini.onnx", "ref/gpt_mini.ref.safetensors"},
		{"onnx/gpt_mini_loss.onnx", "ref/gpt_mini_loss.ref.safetensors"},
		{"onnx/llama_mini.onnx", "ref/llama_mini.ref.safetensors"},
		{"onnx/llama_mini_op23.onnx", "ref/llama_mini.ref.safetensors"},
		{"onnx/llama_mini_extdata.onnx", "ref/llama_mini.ref.safetensors"},
		{"onnx/attn_mha.onnx", "ref/attn_mha_dense.ref.safetensors"},
		{"hf/hf_gpt2.onnx", "hf/hf_gpt2.ref.safetensors"},
		{"hf/hf_bert.onnx", "hf/hf_bert.ref.safetensors"},
		{"hf/hf_llama_gqa_eager.onnx", "hf/hf_llama_gqa_eager.ref.safetensors"},
		{"hf/hf_llama_gqa_sdpa.onnx", "hf/hf_llama_gqa_sdpa.ref.safetensors"},
		{"hf/hf_llama_gqa_d128_sdpa.onnx", "hf/hf_llama_gqa_d128_sdpa.ref.safetensors"},
	}
	// GPT-2 ties its head to the embedding: one PyTorch parameter, which
	// named_parameters() lists under its first name and the graph reads under its
	// last.
	alias := map[string]string{"lm_head.weight": "transformer.wte.weight"}
	root := filepath.Join("..", "..", "testdata")
	for _, c := range cases {
		t.Run(filepath.Base(c.model), func(t *testing.T) {
			m, err := Load(filepath.Join(root, c.model), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := Import(m, ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16}})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := safetensors.Read(filepath.Join(root, c.ref))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			for _, k := range ref.Names {
				if name, ok := strings.CutPrefix(k, "grad."); ok {
					want[name] = ref.Tensors[k].Numel()
				}
			}
			got := map[string]int{}
			for _, p := range f.Params {
				if p.Role != ir.RoleWeight || p.Frozen {
					continue
				}
				name := strings.TrimPrefix(p.Name, "m.")
				if a, ok := alias[name]; ok && strings.HasPrefix(c.model, "hf/hf_gpt2") {
					name = a
				}
				got[name] = int(p.Value.Type.Numel())
			}
			if g, w := keys(got), keys(want); strings.Join(g, " ") != strings.Join(w, " ") {
				t.Errorf("weights\n%v\nwant PyTorch's parameters\n%v", g, w)
			}
			for name, n := range want {
				if got[name] != n {
					t.Errorf("%s: %d numbers, PyTorch has %d", name, got[name], n)
				}
			}
			if len(f.Notes) != 0 {
				t.Errorf("warnings: %v", f.Notes)
			}
		})
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
