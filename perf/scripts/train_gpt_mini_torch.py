"""PyTorch anchor for `lcc train --device=cuda` on gpt_mini's architecture.

Same shape as testdata/onnx/gpt_mini.onnx (GPT-2 style: 2 layers, d=64, 4 heads,
vocab 512, learned positions, LayerNorm, GELU(erf), causal attention), the same task
(synthetic copy over 16 symbols, labels on the second half), batch 8, seq 64,
AdamW(lr 3e-3, wd 0.01), warmup 0 + cosine to lr/10, clip 1.0, fp32, 300 steps.
Prints tokens/s of the steady state (steps 50..300) and the last-10 mean loss.
"""
import math, time, torch, torch.nn as nn, torch.nn.functional as F

torch.manual_seed(1)
dev = "cuda"
V, D, H, L, T, B, STEPS = 512, 64, 4, 2, 64, 8, 300


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, -1)
        sh = lambda t: t.view(B, T, H, D // H).transpose(1, 2)
        a = F.scaled_dot_product_attention(sh(q), sh(k), sh(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(1024, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.lnf(x))


def batch(g):
    half = T // 2
    toks = torch.randint(0, 16, (B, half), generator=g)
    ids = torch.cat([toks, toks], 1)
    labels = torch.full((B, T), -100)
    labels[:, half - 1:T - 1] = ids[:, half:T]
    return ids.to(dev), labels.to(dev)


m = GPT().to(dev)
opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, STEPS) / STEPS)))
g = torch.Generator().manual_seed(1)
losses = []
for step in range(STEPS):
    if step == 50:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    ids, labels = batch(g)
    loss = F.cross_entropy(m(ids).view(-1, V), labels.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    sched.step()
    losses.append(loss.item())
torch.cuda.synchronize()
el = time.perf_counter() - t0
print(f"pytorch {torch.__version__} eager: {(STEPS - 50) * B * T / el:.0f} tok/s (steps 50..300), "
      f"first10 {sum(losses[:10]) / 10:.4f} last10 {sum(losses[-10:]) / 10:.4f}")
