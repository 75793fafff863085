// Package ir is lcc's intermediate representation: typed SSA functions over tensors.
//
// A Func has parameters (inputs, weights, labels, optimizer state), a body of
// nodes in topological order, and results. Every Value is defined exactly once,
// either as a parameter or as a result of one node, and every use comes after its
// definition in Body. Shapes are concrete: ONNX dim_param names (batch, seq) are kept
// as labels on parameter types and bound before lowering, the way TensorRT binds an
// optimisation profile, so every pass can plan memory and FLOPs exactly.
//
// Op properties live in one table (ops.go): arity, typed attributes, shape
// inference, gradient rule. A missing entry is a loud bug, and a table test fails
// if any op lacks Infer, or lacks both Grad and NoGrad.
//
// The text form is MLIR-like and round-trips: Print(Parse(s)) == s for every
// printed function, so pass tests are written as text (see testdata).
//
//	func @block(%0: f32[2,16,64] input "x", %1: f32[64,64] weight "w") {
//	  %2 = matmul(%0, %1) : f32[2,16,64]
//	  %3 = gelu(%2) : f32[2,16,64]
//	  return %3 "y"
//	}
//
// The design follows wazero's SSA builder (contracts on each method, op tables)
// and Go's SSA checker (Verify names the value and says what was expected).
package ir
