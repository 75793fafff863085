// Package interp is lcc's reference interpreter: it runs an ir.Func on the host, one
// kernel per op of the op table (ir.AllOps), in float64.
//
// It is the oracle the rest of lcc is checked against (docs/design.md §8): every pass is
// tested by running the graph before and after it here, the GPU kernels are compared
// with it, and the ONNX importer folds constants with EvalNode. It favours clear,
// deterministic kernels over speed; matmul (gonum's blas64.Gemm, parallel over
// batches and row blocks) and attention (package attention) are tuned, and the
// elementwise, reduction, softmax and normalisation kernels and the rounding split
// long loops over cores (parallel.go), so that a tiny model trains in tests.
//
// Precision model. Floating-point tensors hold float64 whatever their dtype (see
// package tensor). Every kernel computes in float64 and the interpreter then rounds
// each float result to its value's dtype (f32, bf16, f16), so a chain of ops behaves
// like PyTorch running the same ops one by one in that dtype, with float64
// accumulation inside an op (reductions, matmul, softmax) where PyTorch would use
// float32. Options.Precision = tensor.F64 turns every rounding off, casts included,
// so that finite-difference gradient checks see smooth float64 functions.
//
// Invariants:
//   - Kernels never mutate their arguments; a kernel may return a tensor that shares
//     storage with an argument (reshape does), so results are read-only too.
//   - Results are deterministic: parallel kernels give each goroutine disjoint outputs
//     and every sum runs in a fixed order, so a run is bit-for-bit repeatable.
//   - Bad data at run time (a gather index out of range, an integer division by
//     zero) is an error that names the node, never a panic: a panic inside a kernel
//     is recovered and turned into such an error.
//   - A value is dropped as soon as its last reader has run (liveness over the body
//     order), so memory is bounded by the live set, as on the GPU.
//   - A float value that waits across nodes for a later reader rests packed in
//     float32, exactly (every result is rounded to its dtype first), and is unpacked
//     for each reader (pack.go): half the memory, the same bits. HostPeak estimates
//     the peak with the same rules before a run.
//
// Integer and bool tensors live in tensor.Tensor.I; integer results wrap to the width
// of their dtype (i32, i8, u8) as two's-complement machines do.
package interp
