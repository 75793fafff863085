// Package cuda generates lcc's GPU code: it lowers an ir.Func to CUDA C++ kernels
// and a launch plan (docs/design.md §6). GEMMs are not generated; the plan names them
// for cuBLASLt instead.
//
// Design. Each kernel is rendered from a descriptor (op family, shapes, dtypes,
// launch shape, arch) to CUDA C++ text. Shapes are concrete in lcc's IR, so sizes
// are baked into the source as constants: index math divides by constants, and two
// launches of the same family on the same shapes share one kernel. A kernel's
// entry point is named by its family and a hash of its source, so equal kernels
// deduplicate by name and the same function always yields the same bytes. The
// renderer follows tinygrad's cstyle renderer: op semantics live in tables of C
// expressions (elementwise.go) and CUDA templates with #define'd constants
// (attention.go), not in per-op Go logic.
//
// Families:
//   - fused elementwise: a maximal run of ir ops marked OpInfo.Elementwise with one
//     output shape becomes one kernel with numpy-broadcast index math; values used
//     only inside the run stay in registers, scalar constants and full values are
//     inlined as literals; each thread computes 8 (bf16) or 4 (f32) consecutive
//     elements with 16-byte loads and stores where rows allow (elementwise.go);
//   - views (view.go): slices, splits, transposes and expands read only by
//     elementwise kernels, and elementwise results (or concats) whose one use is
//     a concat, get no buffer of their own: kernels index the root buffer in
//     place, so RoPE, SwiGLU and their gradients move no data around the qkv and
//     w13 projections; the flash attention kernels read q, k and v as views and
//     write dq, dk and dv into a concat too, where the views they read cover
//     their buffer (attention_views.go);
//   - recomputation in the consumer (recompute.go): an elementwise value only
//     elementwise kernels read, a few ops from stored values, is computed again
//     by its readers instead of stored (SwiGLU's sigmoid and silu in the
//     backward);
//   - residual adds fused into the norms beside them (residual.go): norm(a + b)
//     writes the sum and the norm in one kernel, r + norm_grad(...).dx is added
//     before the backward kernel's store;
//   - reductions (sum, mean, max, min over any axes), softmax, log_softmax,
//     layer_norm, rms_norm, cumsum: one block per output row, fixed-order tree
//     reductions in fp32 (int64 for integers), the norms with 16-byte accesses
//     where rows allow, a row of up to eight vectors a thread kept in registers
//     (read once) and warp-shuffle block sums; rms_norm_grad and layer_norm_grad:
//     one kernel over stretches of rows (fp32 statistics recomputed per row, the
//     next row's loads under this row's sums) and a two-stage column reduction
//     for the scale and bias gradients (norm_grad.go);
//   - data movement (transpose, expand, slice, tile, concat and split by copies of
//     the parts nobody reads or writes in place, trilu), gather,
//     gather_elements, gather_nd, scatter_add, full, range;
//   - softmax_cross_entropy and nll_loss; fused_linear_cross_entropy (+grad) in
//     row chunks: per chunk a cuBLASLt GEMM into one [rows, V] scratch, an online
//     log-sum-exp kernel that writes the losses or overwrites the chunk with its
//     gradient, and GEMMs for dh and dw (beta = 1 sums dw over chunks); the
//     [N, V] logits never exist (flce.go);
//   - attention, attention_grad, dilated_attention and dilated_attention_grad in
//     bf16 run on the tensor-core kernels of package flash, in the tier the
//     target's arch picks (flash.TierFor): tier 1, FlashAttention-2's algorithm on
//     mma.sync for sm_80 and later; tier 2, wgmma with 128-byte swizzled tiles for
//     sm_90a (Hopper only, so its kernels carry Kernel.Arch "sm_90a" and the plan
//     records it). The backward recomputes probabilities from lse as in
//     FlashAttention-2 (Dao, arXiv 2307.08691) and sums dQ in fixed point, so two
//     runs give the same bits. Other storage and head dims fall back to the
//     scalar kernels (attention.go): one warp per query row, online softmax in
//     fp32, dk/dv owned per key row.
//
// Invariants:
//   - Kernels include no toolkit header: the prelude (prelude.go) defines bf16 and
//     fp16 storage types and conversions, so NVRTC alone compiles them.
//   - Storage may be f32 or bf16 (Options.Storage); math is always fp32 (fp64 for
//     f64 values, int64 for integers). Attention's lse stays f32.
//   - Index math is 32-bit only where every index provably fits, else 64-bit.
//   - Results are deterministic run to run: no kernel uses floating-point atomics.
//     scatter_add sorts (index, position) once with a stable radix sort and sums
//     each output row's run in position order (scatter.go): O(N log N), bitwise
//     reproducible, and an index out of range adds nothing.
//   - A program is generated for one arch (Options.Arch, from the target): portable
//     kernels (Kernel.Arch "") compile for any GPU from sm_80 on, arch-specific ones
//     (tier 2's "sm_90a") only for that arch; the executor refuses a program whose
//     kernels the GPU it finds cannot run (exec.Session.Adopt).
//   - Out-of-range gather or label indices, integer division by zero and casts of
//     NaN to integers do not trap on the GPU (the CPU interpreter reports them):
//     gathers and losses write NaN (0 for integers) for a bad index.
//
// Value ids in the plan are the numbers ir.Print gives (parameters first, then
// node results in body order), so a plan reads alongside graph.lcc.
package cuda
