// Package attention holds lcc's reference CPU attention kernels in float64: dense
// (causal, non-causal, additively masked), LongNet dilated attention, their exact
// backward passes, and the log-sum-exp merge that ring attention uses. The CPU
// interpreter, the autodiff tests and the GPU kernel tests all compare against these,
// so they follow docs/design.md §3 to the letter and favour clarity over speed.
//
// Layouts (row-major, float64):
//
//	q, o, dq, do   [B, T, Hq, D]    element (b, t, h, i) at ((b·T+t)·Hq+h)·D+i
//	k, v, dk, dv   [B, S, Hkv, D]   element (b, j, h, i) at ((b·S+j)·Hkv+h)·D+i
//	lse            [B, Hq, T]       element (b, h, t)    at (b·Hq+h)·T+t
//
// Hq = g·Hkv (grouped-query attention): query head h reads kv head h/g. The softmax
// scale is always passed explicitly (the design's default is 1/sqrt(D), docs/design.md §3).
//
// Invariants every function keeps:
//   - lse[b,h,t] = log Σ_j exp(s·q·k_j + bias_j) over the keys row t sees, so
//     o = Σ_j exp(s·q·k_j + bias_j − lse)·v_j; softmax is computed max-subtracted.
//   - A row that sees no key (fully masked, or selected by no dilated branch) has
//     o = 0 and lse = −Inf. No NaN is ever produced from finite inputs.
//   - Work is split over (batch, head) goroutines that own disjoint outputs; in the
//     backward one goroutine owns a kv head and accumulates its dk/dv over the query
//     heads of its group in a fixed order, so results are bit-for-bit deterministic.
//
// Dilated attention is LongNet's (Ding et al., "LongNet: Scaling Transformers to
// 1,000,000,000 Tokens", arXiv 2307.02486): per branch (w, r) a query attends the
// keys of its segment whose in-segment position matches the head's offset modulo r,
// and branches are merged by their log-sum-exp. The merge is one softmax over the
// union (with multiplicity) of every branch's key set, so the backward is the
// FlashAttention-2 backward (Dao, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning", arXiv 2307.08691) applied per branch with the
// global lse and merged output: D = rowsum(dO⊙O), P = exp(s·q·kᵀ − lse),
// dS = P⊙(dP − D). This is the true gradient of Dilated's output, unlike torchscale,
// which treats the merge weights as constants.
//
// Shapes are the caller's responsibility (the interpreter has run shape inference):
// a slice whose length disagrees with Dims is an internal bug and panics with
// "lcc: BUG: ...". Configurations that come from users are checked by Dims.Validate
// and DilatedConfig.Validate, which return errors.
package attention
