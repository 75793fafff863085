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
		// Parallel residual: the exporter merged and CSE'd each layer's two LayerNorms.
		{"trajectory/gpt_neox.onnx", "trajectory/gpt_neox.ref.safetensors"},
		{"trajectory/qwen2_d64.onnx", "trajectory/qwen2_d64.ref.safetensors"},
		{"trajectory/gemma_noopt.onnx", "trajectory/gemma.ref.safetensors"},
	}
	// GPT-2 and Gemma tie their head to the embedding: one PyTorch parameter, which
	// named_parameters() lists under its first name and the graph reads under its
	// last.
	alias := map[string]map[string]string{
		"hf/hf_gpt2.onnx":             {"lm_head.weight": "transformer.wte.weight"},
		"trajectory/gemma_noopt.onnx": {"lm_head.weight": "model.embed_tokens.weight"},
	}
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
				if a, ok := alias[c.model][name]; ok {
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

// TestCSESplit: GPT-NeoX's two LayerNorms per layer read the same input; the
// exporter merged their initializers and then the two nodes. Each MLP reads its
// own post_attention_layernorm again, computed by a copy of the merged node.
func TestCSESplit(t *testing.T) {
	f := importFile(t, "trajectory/gpt_neox.onnx", nil)
	norms := map[string]bool{} // the norm weights some node reads
	for _, n := range f.Body {
		for _, a := range n.Args {
			if a.Param != nil && strings.Contains(a.Param.Name, "layernorm") {
				norms[a.Param.Name] = true
			}
		}
	}
	for _, layer := range []string{"0", "1"} {
		for _, p := range []string{"input_layernorm", "post_attention_layernorm"} {
			for _, kind := range []string{"weight", "bias"} {
				if name := "m.gpt_neox.layers." + layer + "." + p + "." + kind; !norms[name] {
					t.Errorf("no node reads %s (read: %v)", name, norms)
				}
			}
		}
	}
	if !strings.Contains(strings.Join(f.Remarks, "\n"), "merged by the exporter's CSE into node_layer_norm") ||
		len(f.Untrained) != 0 {
		t.Errorf("remarks %q, untrained %v", f.Remarks, f.Untrained)
	}

	// Without the readers' module scopes the two norms of a layer cannot be told
	// apart: the copies are not made, and the parameters are reported untrained.
	f = importFile(t, "trajectory/gpt_neox.onnx", func(m *Model) {
		for i := range m.Graph.Nodes {
			delete(m.Graph.Nodes[i].Metadata, nameScopesKey)
		}
	})
	want := "m.gpt_neox.layers.0.post_attention_layernorm.bias, m.gpt_neox.layers.0.post_attention_layernorm.weight, " +
		"m.gpt_neox.layers.1.post_attention_layernorm.bias, m.gpt_neox.layers.1.post_attention_layernorm.weight"
	if got := strings.Join(f.Untrained, ", "); got != want || !strings.Contains(strings.Join(f.Notes, " "), want) {
		t.Errorf("untrained %q, notes %q; want %q", got, f.Notes, want)
	}
}

// TestTiedAndFoldedGemma: Gemma ties its head to its embedding; the exporter keeps
// the weight for the Gather and its folded transpose for the head's MatMul, which
// must stay one weight. Its norms scale by 1 + w, which the exporter folds into one
// constant for all five: lcc cannot get w back, and says which parameters.
func TestTiedAndFoldedGemma(t *testing.T) {
	f := importFile(t, "trajectory/gemma.onnx", nil)
	var heads []string
	for _, p := range f.Params {
		if strings.Contains(p.Name, "lm_head") || strings.Contains(p.Name, "embed_tokens") {
			heads = append(heads, p.Name)
		}
	}
	if strings.Join(heads, " ") != "m.lm_head.weight" {
		t.Errorf("embedding and head weights %v, want the one tied m.lm_head.weight", heads)
	}
	want := "m.model.layers.0.input_layernorm.weight, m.model.layers.0.post_attention_layernorm.weight, " +
		"m.model.layers.1.input_layernorm.weight, m.model.layers.1.post_attention_layernorm.weight, m.model.norm.weight"
	if got := strings.Join(f.Untrained, ", "); got != want {
		t.Errorf("untrained %q, want %q", got, want)
	}
}

// importFile imports a testdata model at batch 2 × 16 tokens, after edit.
func importFile(t *testing.T, model string, edit func(*Model)) *ir.Func {
	t.Helper()
	m, err := Load(filepath.Join("..", "..", "testdata", model), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	f, err := Import(m, ImportOptions{Dims: map[string]int64{"batch": 2, "seq": 16}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestEmbeddingPaddingIdx: Gemma's embedding pads with token 0 (nn.Embedding's
// padding_idx, the FX node's third argument); the positions reading row 0 read it
// through stop_gradient, so that row learns only through the tied head, as in
// PyTorch. GPT-2's embedding has no padding_idx and no stop_gradient.
func TestEmbeddingPaddingIdx(t *testing.T) {
	for model, want := range map[string]int{"trajectory/gemma_noopt.onnx": 1, "hf/hf_gpt2.onnx": 0} {
		f := importFile(t, model, nil)
		n := 0
		for _, node := range f.Body {
			if node.Op == ir.OpStopGradient {
				n++
				if u := f.Uses()[node.Result()]; len(u) != 1 || u[0].Op != ir.OpWhere {
					t.Errorf("%s: stop_gradient read by %v, want one where", model, u)
				}
			}
		}
		if n != want {
			t.Errorf("%s: %d stop_gradient nodes, want %d", model, n, want)
		}
	}
}
