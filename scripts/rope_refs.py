"""References for lcc's --rope-theta and --rope-scaling, made by Hugging Face itself.

    python3 scripts/rope_refs.py --out OUTDIR

For a tiny random Llama and a tiny random Qwen2 (1 layer, hidden 64, 2 query heads over 1
kv head of head dim 32, vocab 32, init std 0.2 so that attention is far from uniform), it
exports the base model (rope_theta 10000, no scaling) to OUTDIR/rope_<model>.onnx with
torch.onnx.export(dynamo=True, optimize=False), then, for each variant below, builds the
same model (same weights) with the variant's RoPE configuration and writes
OUTDIR/rope_<model>_<variant>.ref.safetensors: input_ids and labels [2, 64], the logits
under the ONNX output's name, the cross-entropy loss and grad.<name> of every parameter,
all float32 on the CPU. Its metadata holds the lcc flags that ask for the same RoPE
(lcc_flags), and the inv_freq and attention factor Hugging Face computed (inv_freq, JSON;
attention_factor). cmd/lcc/rope_refs_test.go runs `lcc check --grads` on the base export
with those flags against each file. Files: about 1.5 MB in all; copy them to testdata/rope/.

Variants (Hugging Face's rope types, transformers' modeling_rope_utils.py):
  theta    rope_theta 1e6                                  --rope-theta=1e6
  linear   linear, factor 4                                --rope-scaling=linear:4
  ntk      static NTK-aware base: rope_theta 10000·4^(D/(D-2)) (transformers 4's
           _compute_ntk_parameters; no rope type of its own in transformers 5)
                                                           --rope-scaling=ntk:4
  dynamic  dynamic, factor 2, max_position_embeddings 16: at 64 tokens the base is
           10000·(2·64/16 − 1)^(D/(D−2))                   --rope-scaling=dynamic:2,orig=16
  yarn     yarn, factor 4, original_max_position_embeddings 16 (cos and sin ×(0.1 ln 4 + 1))
                                                           --rope-scaling=yarn:4,orig=16
  llama3   llama3, factor 8, low_freq_factor 1, high_freq_factor 4,
           original_max_position_embeddings 16             --rope-scaling=llama3:8,low=1,high=4,orig=16

Needs PyTorch, transformers and onnxscript; downloads nothing.
"""
import argparse, json, os, sys

try:
    import torch, torch.nn.functional as F
    import transformers as tf
    from safetensors.torch import save_file
except ImportError as e:
    sys.exit(f"rope_refs.py needs PyTorch, transformers, safetensors and onnxscript ({e})")

B, T, V, D = 2, 64, 32, 32
BASE = 10000.0

# name: (HF rope parameters, max_position_embeddings, lcc flags)
VARIANTS = {
    "theta": ({"rope_type": "default", "rope_theta": 1e6}, 64, ["--rope-theta=1e6"]),
    "linear": ({"rope_type": "linear", "factor": 4.0}, 64, ["--rope-scaling=linear:4"]),
    "ntk": ({"rope_type": "default", "rope_theta": BASE * 4.0 ** (D / (D - 2))}, 64, ["--rope-scaling=ntk:4"]),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, 16, ["--rope-scaling=dynamic:2,orig=16"]),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, 64,
             ["--rope-scaling=yarn:4,orig=16"]),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16}, 64, ["--rope-scaling=llama3:8,low=1,high=4,orig=16"]),
}

MODELS = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM)}


def config(kind, rope, max_pos):
    cfg_cls, _ = MODELS[kind]
    rope = dict(rope)
    theta = rope.pop("rope_theta", BASE)
    kw = dict(vocab_size=V, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              num_key_value_heads=1, head_dim=D, max_position_embeddings=max_pos, initializer_range=0.2,
              attn_implementation="sdpa", tie_word_embeddings=False)
    if kind == "qwen2":
        kw["use_sliding_window"] = False
    scaling = None if rope["rope_type"] == "default" else rope
    if int(tf.__version__.split(".")[0]) >= 5:  # one rope_parameters dict
        return cfg_cls(rope_parameters={"rope_theta": theta, **rope}, **kw)
    # transformers 4 (its yarn reads max_position_embeddings, not the original length)
    if rope["rope_type"] == "yarn":
        sys.exit("rope_refs.py: yarn needs transformers 5 (original_max_position_embeddings)")
    return cfg_cls(rope_theta=theta, rope_scaling=scaling, **kw)


class LM(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for the .onnx and .ref.safetensors files")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import onnx
    for kind, (_, model_cls) in MODELS.items():
        torch.manual_seed(0)
        base = model_cls(config(kind, {"rope_type": "default"}, 64)).float().eval()
        ids = torch.randint(0, V, (B, T))
        labels = torch.randint(0, V, (B, T))
        labels[0, :3] = -100
        path = os.path.join(a.out, f"rope_{kind}.onnx")
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
        prog = torch.onnx.export(LM(base), (ids,), dynamo=True, input_names=["input_ids"],
                                 dynamic_shapes={"input_ids": {0: batch, 1: seq}}, opset_version=18, optimize=False)
        prog.save(path)
        out_name = onnx.load(path, load_external_data=False).graph.output[0].name
        for name, (rope, max_pos, flags) in VARIANTS.items():
            m = model_cls(config(kind, rope, max_pos)).float().eval()
            m.load_state_dict(base.state_dict())
            logits = LM(m)(ids)
            loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
            loss.backward()
            rot = m.model.rotary_emb  # after the forward: dynamic's inv_freq is the one it used
            t = {"input_ids": ids, "labels": labels, "loss": loss.detach().reshape(1),
                 out_name: logits.detach().clone()}
            for n, q in m.named_parameters():
                if q.grad is not None:
                    t["grad." + n] = q.grad.detach().clone()
            meta = {"lcc_flags": " ".join(flags), "inv_freq": json.dumps([float(x) for x in rot.inv_freq]),
                    "attention_factor": repr(float(rot.attention_scaling)), "transformers": tf.__version__}
            ref = os.path.join(a.out, f"rope_{kind}_{name}.ref.safetensors")
            save_file({k: v.contiguous() for k, v in t.items()}, ref, metadata=meta)
            print(f"ok {ref}: {' '.join(flags)}; inv_freq[0:3] {[round(float(x), 6) for x in rot.inv_freq[:3]]}, "
                  f"attention factor {float(rot.attention_scaling):.6g}")


if __name__ == "__main__":
    main()
