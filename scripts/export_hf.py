"""Exports tiny, randomly initialised Hugging Face models to ONNX with PyTorch's
exporter, with reference outputs and gradients, for lcc's import tests.

Run where PyTorch, transformers and onnxscript exist (the GPU machine has them):
    python3 scripts/export_hf.py OUTDIR [NAME...]
Writes OUTDIR/hf_<name>.onnx and OUTDIR/hf_<name>.ref.safetensors for each model (the
four short ones when no NAME is given; the *_long and *_d128 ones only when named); the
reference holds input_ids (and attention_mask), labels or dy, the outputs, the loss,
param.<name> and grad.<name> for every parameter (float32, computed on the CPU).
No weights are downloaded: every model is built from a small config.
"""
import sys, os, traceback
import torch, torch.nn.functional as F
from safetensors.torch import save_file
import transformers as tf

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
B, T, V = 2, 16, 512


class LM(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits


class Enc(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state


def export(name, wrapper, args, input_names, dynamic):
    wrapper.eval()
    path = os.path.join(out, f"hf_{name}.onnx")
    prog = torch.onnx.export(wrapper, args, dynamo=True, input_names=input_names,
                             dynamic_shapes=dynamic, opset_version=18)
    prog.save(path)
    return path


def ref_lm(name, model, B=B, T=T, V=V, logits_copy=True):
    w = LM(model)
    ids = torch.randint(0, V, (B, T))
    labels = torch.randint(0, V, (B, T))
    labels[0, :3] = -100
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    # torch.export specialises a dim whose example size is 1, so batch is static then.
    export(name, w, (ids,), ["input_ids"], {"input_ids": {0: batch, 1: seq} if B > 1 else {1: seq}})
    w.train(False)
    logits = w(ids)
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    loss.backward()
    t = {"input_ids": ids, "labels": labels, "loss": loss.detach().reshape(1)}
    if logits_copy:
        t["logits"] = logits.detach()
    for n, p in model.named_parameters():
        t["param." + n] = p.detach().clone()
        if p.grad is not None:
            t["grad." + n] = p.grad.detach().clone()
    # The output name the exporter chose is unknown here; lcc compares by name, so
    # store the logits under the ONNX output name too.
    import onnx
    o = onnx.load(os.path.join(out, f"hf_{name}.onnx"), load_external_data=False)
    t[o.graph.output[0].name] = logits.detach().clone()
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out, f"hf_{name}.ref.safetensors"))


def ref_enc(name, model):
    w = Enc(model)
    ids = torch.randint(0, V, (B, T))
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, 12:] = 0
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    export(name, w, (ids, mask), ["input_ids", "attention_mask"],
           {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    y = w(ids, mask)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    t = {"input_ids": ids, "attention_mask": mask, "dy": dy}
    import onnx
    o = onnx.load(os.path.join(out, f"hf_{name}.onnx"), load_external_data=False)
    t[o.graph.output[0].name] = y.detach().clone()
    for n, p in model.named_parameters():
        t["param." + n] = p.detach().clone()
        if p.grad is not None:
            t["grad." + n] = p.grad.detach().clone()
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(out, f"hf_{name}.ref.safetensors"))


jobs = {
    "gpt2": lambda: ref_lm("gpt2", tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0, embd_pdrop=0,
        attn_pdrop=0, attn_implementation="eager"))),
    "llama_gqa_eager": lambda: ref_lm("llama_gqa_eager", tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager"))),
    "llama_gqa_sdpa": lambda: ref_lm("llama_gqa_sdpa", tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa"))),
    "bert": lambda: ref_enc("bert", tf.BertModel(tf.BertConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64, hidden_dropout_prob=0, attention_probs_dropout_prob=0,
        attn_implementation="eager"), add_pooling_layer=False)),
}
# Long references (> 4096 tokens, past the mask evaluator's cap; 4104 is a multiple of
# 2·4 for zigzag ring attention over 4 ranks) for `lcc check --ranks=4
# --attention=ring --grads`: the same Llama GQA shape at a smaller width and vocab, one
# sequence, so that the files stay near 1 MB and the CPU check stays quick.
LONG_T, LONG_V = 4104, 64


def llama_long(attn):
    return lambda: ref_lm(f"llama_gqa_{attn}_long", tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=LONG_V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, attn_implementation=attn)),
        B=1, T=LONG_T, V=LONG_V, logits_copy=False)


# Head dim 128 with grouped-query attention (4 query heads over 2 kv heads), the
# shape lcc's tensor-core attention kernels take (head dim 64 or 128, bf16): `lcc
# check --device=cuda --precision=bf16` runs them on this model. 320 tokens are two
# and a half of the forward's 128-row query tiles and of the backward's 128-key tiles,
# so the kernels' ragged last tile and causal tile skipping are exercised. hidden_size
# is 32 (head_dim is set apart from it) to keep the files small; the wider init
# (0.2 instead of 0.02) gives attention scores of order one, not a near-uniform softmax.
D128_T, D128_V = 320, 64


def llama_d128(attn):
    return lambda: ref_lm(f"llama_gqa_d128_{attn}", tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=D128_V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, max_position_embeddings=1024, initializer_range=0.2,
        attn_implementation=attn)), B=2, T=D128_T, V=D128_V, logits_copy=False)


named_jobs = {"llama_gqa_eager_long": llama_long("eager"), "llama_gqa_sdpa_long": llama_long("sdpa"),
              "llama_gqa_d128_sdpa": llama_d128("sdpa"), "llama_gqa_d128_eager": llama_d128("eager")}
names = sys.argv[2:] or list(jobs)
for name in names:
    if name not in jobs and name not in named_jobs:
        sys.exit(f"unknown model {name!r} (have: {', '.join(list(jobs) + list(named_jobs))})")
for name in names:
    job = jobs.get(name) or named_jobs[name]
    try:
        job()
        print("ok", name)
    except Exception:
        print("FAILED", name)
        traceback.print_exc()
