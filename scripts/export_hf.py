"""Exports a Hugging Face causal language model to ONNX for lcc, with PyTorch's exporter.

    python3 scripts/export_hf.py MODEL -o model.onnx [--seq 64] [--batch 2] [--from-config]

MODEL is a model name on the Hugging Face Hub (HuggingFaceTB/SmolLM2-135M) or a local
folder holding config.json and the weights (what save_pretrained writes). The export
takes one input, input_ids [batch, seq], and returns the logits; `batch` and `seq` are
dynamic dims with those names, which `lcc train --batch --seq-len` bind. The options
that matter to lcc (see export below):
  - dynamo=True: torch.export, whose graph signature and per-node provenance lcc reads to
    train exactly PyTorch's parameters under their state_dict names;
  - optimize=False keeps every parameter apart, its own initializer: the exporter's
    optimizer merges parameters with equal initial values (fresh norm scales), then the
    nodes reading them, and folds a parameter's arithmetic into constants. lcc undoes
    most of that from the provenance (and says so), but refuses a model with a
    parameter it cannot give back its own weight. --optimize runs the optimizer anyway;
  - weights stay initializers (not graph inputs), in the file, or in MODEL.onnx.data
    beside it when they pass 2 GB (ONNX's protobuf limit; lcc reads external data that
    lies in the model's folder);
  - batch and seq examples of 2 or more: torch.export specialises a dim whose example is 1.
--from-config builds the model from its config with fresh random weights (no weight
download), for trying lcc on an architecture before training it for real.

    python3 scripts/export_hf.py --testdata OUTDIR [NAME...]

writes lcc's test models, tiny randomly initialised ones, with reference outputs and
gradients: OUTDIR/hf_<name>.onnx and OUTDIR/hf_<name>.ref.safetensors for each model (the
four short ones when no NAME is given; the *_long and *_d128 ones only when named); the
reference holds input_ids (and attention_mask), labels or dy, the outputs, the loss,
param.<name> and grad.<name> for every parameter (float32, computed on the CPU). That is
how testdata/hf was made. No weights are downloaded: every model is built from a small config.

Needs PyTorch, transformers and onnxscript (pip install torch transformers onnxscript).
"""
import argparse, sys, os, traceback
try:
    import torch, torch.nn.functional as F
    import transformers as tf
except ImportError as e:
    sys.exit(f"export_hf.py needs PyTorch, transformers and onnxscript ({e}): "
             "pip install torch transformers onnxscript")

out = None  # the --testdata folder
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
    from safetensors.torch import save_file
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
    from safetensors.torch import save_file
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


# Sliding windows and head dims off 64 and 128, the attention lcc's kernels took last:
# Mistral with a window of 8 over 16 tokens (eager and SDPA masks, built from positions),
# Qwen2 with its first layer full and its second windowed (max_window_layers=1), Gemma
# with head dim 256 (tied embeddings, GeGLU) and Phi-3 with head dim 96. At 320 tokens
# (batch 2), the window (100) crosses the flash kernels' tiles and the head dims run on
# their padded kernels; init std 0.2 keeps the attention scores of order one.
WIN_T, WIN_V = 320, 64


def mistral_window(attn):
    return lambda: ref_lm(f"mistral_window_{attn}", tf.MistralForCausalLM(tf.MistralConfig(
        vocab_size=WIN_V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, sliding_window=100, max_position_embeddings=1024,
        initializer_range=0.2, attn_implementation=attn)), B=2, T=WIN_T, V=WIN_V, logits_copy=False)


named_jobs = {"llama_gqa_eager_long": llama_long("eager"), "llama_gqa_sdpa_long": llama_long("sdpa"),
              "llama_gqa_d128_sdpa": llama_d128("sdpa"), "llama_gqa_d128_eager": llama_d128("eager"),
              "mistral_window_sdpa": mistral_window("sdpa"), "mistral_window_eager": mistral_window("eager"),
              "qwen2_window": lambda: ref_lm("qwen2_window", tf.Qwen2ForCausalLM(tf.Qwen2Config(
                  vocab_size=WIN_V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=100,
                  max_window_layers=1, max_position_embeddings=1024, initializer_range=0.2,
                  attn_implementation="sdpa")), B=2, T=WIN_T, V=WIN_V, logits_copy=False),
              "gemma_d256": lambda: ref_lm("gemma_d256", tf.GemmaForCausalLM(tf.GemmaConfig(
                  vocab_size=WIN_V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=256, max_position_embeddings=1024,
                  initializer_range=0.2, attn_implementation="sdpa")), B=2, T=WIN_T, V=WIN_V, logits_copy=False),
              "phi3_d96": lambda: ref_lm("phi3_d96", tf.Phi3ForCausalLM(tf.Phi3Config(
                  vocab_size=WIN_V, hidden_size=192, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                  initializer_range=0.2, attn_implementation="sdpa", pad_token_id=0)),
                  B=2, T=WIN_T, V=WIN_V, logits_copy=False)}


def testdata(folder, names):
    global out
    out = folder
    os.makedirs(out, exist_ok=True)
    names = names or list(jobs)
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


def export_model(a):
    """Exports a causal LM (a Hub name or a local folder) as lcc trains it: input_ids
    [batch, seq] in, logits out, batch and seq dynamic."""
    if a.batch < 2 or a.seq < 2:
        sys.exit("--batch and --seq: want 2 or more (torch.export makes a dim of example size 1 static)")
    if a.from_config:
        config = tf.AutoConfig.from_pretrained(a.model, trust_remote_code=a.trust_remote_code)
        model = tf.AutoModelForCausalLM.from_config(config, attn_implementation=a.attention,
                                                    trust_remote_code=a.trust_remote_code)
    else:
        model = tf.AutoModelForCausalLM.from_pretrained(a.model, attn_implementation=a.attention,
                                                        trust_remote_code=a.trust_remote_code)
    model = model.float().eval()  # fp32 weights: lcc keeps fp32 masters (--precision picks storage)
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (a.batch, a.seq))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    # dynamo=True records the provenance lcc reads; optimize=False keeps each parameter
    # its own initializer (weights stay initializers, not inputs).
    prog = torch.onnx.export(LM(model), (ids,), dynamo=True, input_names=["input_ids"],
                             output_names=["logits"], dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                             opset_version=18, optimize=a.optimize)
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    prog.save(a.output)  # weights over 2 GB go to a.output + ".data", beside it
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.output}: {type(model).__name__}, {params} parameters, vocab {vocab}; "
          f"input input_ids [batch, seq], output logits [batch, seq, {vocab}]")
    print(f"next: lcc compile {a.output} --seq-len=N   (then lcc train {a.output} "
          f"--data=tokens:FILE --seq-len=N --batch=B --steps=S)")


def main():
    p = argparse.ArgumentParser(description="export a Hugging Face causal LM to ONNX for lcc",
                                epilog="python3 scripts/export_hf.py --testdata OUTDIR [NAME...] "
                                       "writes lcc's test models instead")
    p.add_argument("model", nargs="?", help="a Hub model name or a local folder")
    p.add_argument("-o", "--output", help="the .onnx file to write")
    p.add_argument("--seq", type=int, default=64, help="the example sequence length (seq stays dynamic)")
    p.add_argument("--batch", type=int, default=2, help="the example batch (batch stays dynamic)")
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "eager"],
                   help="the model's attention implementation; lcc matches both")
    p.add_argument("--from-config", action="store_true",
                   help="fresh random weights from the model's config (no weight download)")
    p.add_argument("--optimize", action="store_true",
                   help="run the exporter's optimizer (merges equal parameters and folds; lcc undoes most)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow a model whose code lives on the Hub (runs that code)")
    p.add_argument("--testdata", metavar="OUTDIR", help="write lcc's test models and references")
    a, rest = p.parse_known_args()
    if a.testdata:
        return testdata(a.testdata, ([a.model] if a.model else []) + rest)
    if rest:
        p.error(f"unrecognised arguments: {' '.join(rest)}")
    if not a.model or not a.output:
        p.error("give MODEL and -o FILE.onnx (or --testdata OUTDIR)")
    export_model(a)


if __name__ == "__main__":
    main()
