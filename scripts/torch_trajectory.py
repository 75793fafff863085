"""Trains models in PyTorch with lcc's recipe and records the per-step losses, so that
a Go test can hold `lcc train`'s trajectory to PyTorch's (testdata/trajectory).

Run where PyTorch, transformers, onnx and onnxscript exist (the GPU machine has them):
    python3 scripts/torch_trajectory.py OUTDIR [NAME...]
with testdata/ (hf/, ref/, trajectory/tokens.bin) beside the script's parent, or
--testdata DIR. For each NAME (all when none is given) it writes OUTDIR/NAME.json:
the losses, gradient norms and learning rates of every step.

The recipe is lcc train's (train/, train/optim, train/data), step for step:
  - AdamW (torch.optim.AdamW, single-tensor): betas (0.9, 0.999), eps 1e-8, decoupled
    weight decay on every parameter (model.parameters(): a tied weight is one);
  - global-norm clipping: grads *= min(1, max/(norm + 1e-6)) (clip_grad_norm_);
  - learning rate of update s (0-based): lr·(s+1)/warmup during warmup, then a cosine
    from lr to min_lr (lr/10) reached at the last step;
  - loss: the mean cross-entropy of the logits against the next tokens;
  - data: tokens:FILE, little-endian uint16; windows of T+1 tokens read in order,
    each starting T tokens after the last (window k at token (k mod W)·T, W = (n−1)/T,
    while T stays the same), one that would pass the end starting again at token 0;
    inputs its first T, labels its last T; step s reads the next B windows.

    python3 scripts/torch_trajectory.py OUTDIR --progressive
writes OUTDIR/progressive.json instead: llama_mini trained 10 steps at T=32, then 10
at T=64 (--seq-len-schedule 32:10,64, or lcc train --steps 20 --stop-at 10 resumed at
--seq-len 64), batch 2, warmup 5, one schedule over the 20 steps; the windows at T=64
start at the token after the last T=32 window (train/data: State.Offset).
Everything runs in float32 on the CPU (no TF32, no reduced-precision reductions).

Models come in two kinds. Those already under testdata/ are rebuilt in PyTorch with the
exact weights of their reference file (param.<name>), and the rebuilt model's logits are
checked against the reference's before training. The others are built here from tiny
Hugging Face configs (torch.manual_seed(0)), exported with torch.onnx.export(dynamo=True)
(opset 18, dynamic batch and seq), written with a reference file made the way
scripts/export_hf.py makes testdata/hf's, and trained from the same weights.
"""
import argparse, json, math, os, struct, sys, traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS, LR, WARMUP, WD, CLIP = 30, 1e-3, 5, 0.01, 1.0
T = 16


def lr_at(s, lr=LR, min_lr=LR / 10, warmup=WARMUP, total=STEPS):
    """optim.Schedule.At."""
    if s < warmup:
        return lr * (s + 1) / warmup
    span = total - warmup
    if span <= 0:
        return lr
    p = min(1.0, (s - warmup) / span)
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))


def read_tokens(path):
    raw = open(path, "rb").read()
    return list(struct.unpack("<%dH" % (len(raw) // 2), raw))


def batch(tokens, s, B, T):
    """The batch of step s: data.fileSource's windows, read in order."""
    W = (len(tokens) - 1) // T
    ids, labels = [], []
    for i in range(B):
        k = (s * B + i) % W
        win = tokens[k * T:k * T + T + 1]
        ids.append(win[:T])
        labels.append(win[1:])
    return torch.tensor(ids, dtype=torch.int64), torch.tensor(labels, dtype=torch.int64)


class Windows:
    """data.fileSource: windows of T+1 tokens in order, wrapping to token 0."""

    def __init__(s, tokens):
        s.tokens, s.off = tokens, 0

    def batch(s, B, T):
        ids, labels = [], []
        for _ in range(B):
            if s.off + T + 1 > len(s.tokens):
                s.off = 0
            win = s.tokens[s.off:s.off + T + 1]
            s.off += T
            ids.append(win[:T])
            labels.append(win[1:])
        return torch.tensor(ids, dtype=torch.int64), torch.tensor(labels, dtype=torch.int64)


def train(logits_of, params, tokens, B, T, stages=None, steps=STEPS):
    """stages: [(T, steps)] in order (T for all STEPS when None), one schedule over all."""
    params = list(params)
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD,
                            foreach=False)
    losses, norms, lrs = [], [], []
    lens = [t for t, n in (stages or [(T, steps)]) for _ in range(n)]
    win = Windows(tokens)
    for s in range(steps):
        if stages is None:
            ids, labels = batch(tokens, s, B, T)
        else:
            ids, labels = win.batch(B, lens[s])
        logits = logits_of(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP, foreach=False)
        for g in opt.param_groups:
            g["lr"] = lr_at(s, total=steps)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(lr_at(s, total=steps))
    return losses, norms, lrs


# ---- the models of testdata/onnx (their PyTorch source, rebuilt from the state dict)

class GPTBlock(nn.Module):
    def __init__(s, C, H):
        super().__init__()
        s.H = H
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc1, s.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in s.qkv(s.ln1(x)).split(C, -1))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // s.H))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        att = torch.where(mask, float("-inf"), att).softmax(-1)
        x = x + s.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))


class GPTMini(nn.Module):
    """gpt_mini.onnx: GPT-2 style, learned positions, LayerNorm, GELU, explicit mask."""

    def __init__(s, V=512, C=64, H=4, L=2, P=1024):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, C), nn.Embedding(P, C)
        s.blocks = nn.ModuleList([GPTBlock(C, H) for _ in range(L)])
        s.lnf, s.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(s, ids):
        x = s.tok(ids) + s.pos(torch.arange(ids.shape[1]))
        for b in s.blocks:
            x = b(x)
        return s.head(s.lnf(x))


class RMSNorm(nn.Module):
    def __init__(s, C):
        super().__init__()
        s.weight = nn.Parameter(torch.ones(C))

    def forward(s, x):
        return x * (1.0 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) * s.weight


def rope(x):  # [B, H, T, D]
    T, half = x.shape[2], x.shape[-1] // 2
    inv = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float32) / half))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class LlamaBlock(nn.Module):
    def __init__(s, C, H, FF):
        super().__init__()
        s.H = H
        s.n1, s.n2 = RMSNorm(C), RMSNorm(C)
        s.wq, s.wk, s.wv, s.wo = (nn.Linear(C, C, bias=False) for _ in range(4))
        s.w1, s.w3, s.w2 = nn.Linear(C, FF, bias=False), nn.Linear(C, FF, bias=False), nn.Linear(FF, C, bias=False)

    def forward(s, x):
        B, T, C = x.shape
        h = s.n1(x)
        q, k, v = (w(h).view(B, T, s.H, C // s.H).transpose(1, 2) for w in (s.wq, s.wk, s.wv))
        a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + s.wo(a.transpose(1, 2).reshape(B, T, C))
        h = s.n2(x)
        return x + s.w2(F.silu(s.w1(h)) * s.w3(h))


class LlamaMini(nn.Module):
    """llama_mini.onnx: RMSNorm (eps 1e-6), RoPE (half split), SwiGLU, causal SDPA."""

    def __init__(s, V=512, C=64, H=4, L=2, FF=192):
        super().__init__()
        s.tok = nn.Embedding(V, C)
        s.blocks = nn.ModuleList([LlamaBlock(C, H, FF) for _ in range(L)])
        s.norm, s.head = RMSNorm(C), nn.Linear(C, V, bias=False)

    def forward(s, ids):
        x = s.tok(ids)
        for b in s.blocks:
            x = b(x)
        return s.head(s.norm(x))


# ---- Hugging Face models

def hf_models():
    import transformers as tf
    V, LV = 512, 64

    def qwen2():
        c = tf.Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                           max_position_embeddings=512, initializer_range=0.2, attn_implementation="sdpa",
                           tie_word_embeddings=False)
        c.head_dim = 64  # a config without the field still gives the attention its head dim
        return tf.Qwen2ForCausalLM(c)

    def llama(vocab, d, ff, positions, attn, **extra):
        """scripts/export_hf.py's Llama configs: 2 layers, 4 query heads over 2."""
        return lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            vocab_size=vocab, hidden_size=d, intermediate_size=ff, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=positions, attn_implementation=attn, **extra))

    return {
        # testdata/hf (scripts/export_hf.py's configs)
        "hf_gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0, embd_pdrop=0,
            attn_pdrop=0, attn_implementation="eager")),
        "hf_llama_gqa_eager": llama(V, 64, 128, 64, "eager"),
        "hf_llama_gqa_sdpa": llama(V, 64, 128, 64, "sdpa"),
        "hf_llama_gqa_eager_long": llama(LV, 32, 64, 8192, "eager"),
        "hf_llama_gqa_sdpa_long": llama(LV, 32, 64, 8192, "sdpa"),
        "hf_llama_gqa_d128_sdpa": llama(LV, 32, 64, 1024, "sdpa", head_dim=128, initializer_range=0.2),
        # new exports: tied and √d-scaled embedding, parallel residual, head dim 64 with biases
        "gemma": lambda: tf.GemmaForCausalLM(tf.GemmaConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64, attn_implementation="eager")),
        "gpt_neox": lambda: tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, use_parallel_residual=True, hidden_dropout=0.0,
            attention_dropout=0.0, tie_word_embeddings=False, attn_implementation="eager")),
        "qwen2_d64": qwen2,
    }


class LM(nn.Module):
    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, input_ids):
        return s.m(input_ids=input_ids, use_cache=False, return_dict=True).logits


# testdata models: name -> (file under testdata, reference, batch, builder kind)
TESTDATA = {
    "gpt_mini": ("onnx/gpt_mini.onnx", "ref/gpt_mini.ref.safetensors", 2, "gpt_mini"),
    "gpt_mini_loss": ("onnx/gpt_mini_loss.onnx", "ref/gpt_mini_loss.ref.safetensors", 2, "gpt_mini"),
    "llama_mini": ("onnx/llama_mini.onnx", "ref/llama_mini.ref.safetensors", 2, "llama_mini"),
    "hf_gpt2": ("hf/hf_gpt2.onnx", "hf/hf_gpt2.ref.safetensors", 2, "hf"),
    "hf_llama_gqa_eager": ("hf/hf_llama_gqa_eager.onnx", "hf/hf_llama_gqa_eager.ref.safetensors", 2, "hf"),
    "hf_llama_gqa_sdpa": ("hf/hf_llama_gqa_sdpa.onnx", "hf/hf_llama_gqa_sdpa.ref.safetensors", 2, "hf"),
    # exported with batch 1: torch.export made the batch static
    "hf_llama_gqa_eager_long": ("hf/hf_llama_gqa_eager_long.onnx",
                                "hf/hf_llama_gqa_eager_long.ref.safetensors", 1, "hf"),
    "hf_llama_gqa_sdpa_long": ("hf/hf_llama_gqa_sdpa_long.onnx",
                               "hf/hf_llama_gqa_sdpa_long.ref.safetensors", 1, "hf"),
    "hf_llama_gqa_d128_sdpa": ("hf/hf_llama_gqa_d128_sdpa.onnx",
                               "hf/hf_llama_gqa_d128_sdpa.ref.safetensors", 2, "hf"),
}
# new exports: name -> (reference batch, reference seq, export variants)
EXPORTS = {
    "gemma": (2, 16, {"": True, "_noopt": False}),
    "gpt_neox": (2, 16, {"": True, "_noopt": False}),
    "qwen2_d64": (2, 160, {"": True}),
}


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def rebuild(name, testdata):
    """The PyTorch model of a testdata file, with its reference's weights; the
    relative error of its logits against the reference's."""
    from safetensors.torch import load_file
    path, refpath, B, kind = TESTDATA[name]
    ref = load_file(os.path.join(testdata, refpath))
    sd = {k[len("param."):]: v for k, v in ref.items() if k.startswith("param.")}
    if kind == "hf":
        m = hf_models()[name]()
        fwd = LM(m)
    else:
        m = GPTMini() if kind == "gpt_mini" else LlamaMini()
        sd = {k[2:] if k.startswith("m.") else k: v for k, v in sd.items()}
        fwd = m
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # A tied weight is listed once; buffers (RoPE's inv_freq) come from the config.
    params = {n for n, _ in m.named_parameters(remove_duplicate=False)}
    tied = params - {n for n, _ in m.named_parameters()}
    if unexpected or (set(missing) & params) - tied:
        raise RuntimeError(f"{name}: state dict mismatch: missing {missing}, unexpected {unexpected}")
    m.eval()
    ids = ref["input_ids"]
    with torch.no_grad():
        logits = fwd(ids)
    want = ref.get("logits")
    if want is None:  # stored under the ONNX output's name only
        want = next(v for k, v in ref.items() if not k.startswith(("param.", "grad.")) and
                    v.shape == logits.shape and v.is_floating_point())
    return m, fwd, B, path, rel_err(logits, want)


def write_ref(path, w, model, B, T, V):
    """An export_hf.py-style reference: inputs, labels, logits (also under the ONNX
    output's name), the mean cross-entropy, param.<name> and grad.<name>."""
    import onnx
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), generator=g)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, :3] = -100
    model.zero_grad(set_to_none=True)
    logits = w(ids)
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    loss.backward()
    t = {"input_ids": ids, "labels": labels, "loss": loss.detach().reshape(1), "logits": logits.detach()}
    out_name = onnx.load(path, load_external_data=False).graph.output[0].name
    t[out_name] = logits.detach().clone()
    for n, p in model.named_parameters():
        t["param." + n] = p.detach().clone()
        if p.grad is not None:
            t["grad." + n] = p.grad.detach().clone()
    save_file({k: v.contiguous() for k, v in t.items()}, path.replace(".onnx", ".ref.safetensors"))
    model.zero_grad(set_to_none=True)


def dump(path, out):
    """A text dump of an export's nodes with their metadata, for reading without onnx."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    with open(out, "w") as f:
        for p in m.metadata_props:
            f.write(f"model meta {p.key}: {p.value}\n")
        for p in m.graph.metadata_props:
            f.write(f"graph meta {p.key}: {p.value}\n")
        for i in m.graph.initializer:
            f.write(f"init {i.name} {list(i.dims)}\n")
        for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
            for p in v.metadata_props:
                f.write(f"value {v.name} meta {p.key}: {p.value}\n")
        for n in m.graph.node:
            f.write(f"node {n.name} {n.op_type} {list(n.input)} -> {list(n.output)}\n")
            for p in n.metadata_props:
                f.write(f"    {p.key}: {p.value}\n")


def export(name, out):
    """Builds, exports and references a new model; trains it from the same weights."""
    B, RT, variants = EXPORTS[name]
    torch.manual_seed(0)
    m = hf_models()[name]().eval()
    w = LM(m).eval()
    V = m.config.vocab_size
    init = {k: v.clone() for k, v in m.state_dict().items()}
    ids = torch.randint(0, V, (2, 16))
    dims = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}}
    for suffix, optimize in variants.items():
        path = os.path.join(out, f"{name}{suffix}.onnx")
        prog = torch.onnx.export(w, (ids,), dynamo=True, input_names=["input_ids"], dynamic_shapes=dims,
                                 opset_version=18, optimize=optimize)
        prog.save(path)
        dump(path, os.path.join(out, f"{name}{suffix}.dump.txt"))
        with open(os.path.join(out, f"{name}{suffix}.fx.txt"), "w") as f:
            f.write(str(getattr(prog, "exported_program", None)))
        if suffix == "":
            write_ref(path, w, m, B, RT, V)
    m.load_state_dict(init)
    return m, w, 2, f"trajectory/{name}.onnx"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--testdata", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                        "testdata"))
    ap.add_argument("--progressive", action="store_true",
                    help="write progressive.json: llama_mini 10 steps at seq 32, then 10 at 64")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tokens = read_tokens(os.path.join(a.testdata, "trajectory", "tokens.bin"))
    if a.progressive:
        m, fwd, B, path, err = rebuild("llama_mini", a.testdata)
        if not err < 1e-4:
            raise RuntimeError(f"llama_mini: rebuilt logits differ from the reference by {err:.3g}")
        stages = [(32, 10), (64, 10)]
        losses, norms, lrs = train(fwd, m.parameters(), tokens, B, None, stages=stages, steps=20)
        rec = dict(name="progressive", model=path, batch=B, seq_len_schedule="32:10,64", stages=stages,
                   steps=20, lr=LR, warmup=WARMUP, min_lr=LR / 10, weight_decay=WD, clip=CLIP,
                   data="tokens:trajectory/tokens.bin", losses=losses, grad_norms=norms, lrs=lrs,
                   torch=torch.__version__)
        with open(os.path.join(a.out, "progressive.json"), "w") as f:
            json.dump(rec, f, indent=1)
        print("ok progressive", losses[0], losses[-1], flush=True)
        return
    failed = []
    for name in a.names or list(TESTDATA) + list(EXPORTS):
        try:
            rec = {"name": name}
            if name in TESTDATA:
                m, fwd, B, path, err = rebuild(name, a.testdata)
                rec["ref_logits_rel_err"] = err
                if not err < 1e-4:
                    raise RuntimeError(f"{name}: rebuilt logits differ from the reference by {err:.3g}")
            else:
                m, fwd, B, path = export(name, a.out)
            losses, norms, lrs = train(fwd, m.parameters(), tokens, B, T)
            import transformers
            rec.update(model=path, batch=B, seq_len=T, steps=STEPS, lr=LR, warmup=WARMUP, min_lr=LR / 10,
                       weight_decay=WD, clip=CLIP, data="tokens:trajectory/tokens.bin",
                       params=sum(p.numel() for p in m.parameters()), losses=losses, grad_norms=norms,
                       lrs=lrs, torch=torch.__version__, transformers=transformers.__version__)
            with open(os.path.join(a.out, f"{name}.json"), "w") as f:
                json.dump(rec, f, indent=1)
            print("ok", name, losses[0], losses[-1], flush=True)
        except Exception:
            failed.append(name)
            print("FAILED", name, flush=True)
            traceback.print_exc()
    if failed:
        print("failed:", " ".join(failed))


if __name__ == "__main__":
    main()
