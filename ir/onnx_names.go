package ir

// This file is the ONNX column of the op table: the standard ONNX op (default
// domain, opset 18) whose semantics, attributes included, equal the IR op's.
// frontends/onnx exports the op under that name and imports that ONNX op as this
// one (by its own lowering where ONNX's op is broader, as Div is for integers).
// Ops without an entry have no ONNX equal: they are imported from compositions
// and exported in lcc's own domain.
var onnxNames = map[Op]string{
	OpAdd: "Add", OpSub: "Sub", OpMul: "Mul", OpDiv: "Div", OpPow: "Pow",
	OpNeg: "Neg", OpExp: "Exp", OpLog: "Log", OpSqrt: "Sqrt", OpRecip: "Reciprocal",
	OpTanh: "Tanh", OpErf: "Erf", OpSigmoid: "Sigmoid", OpRelu: "Relu", OpAbs: "Abs",
	OpCos: "Cos", OpSin: "Sin", OpNot: "Not", OpIsNaN: "IsNaN", OpEq: "Equal",
	OpLt: "Less", OpLe: "LessOrEqual", OpGt: "Greater", OpGe: "GreaterOrEqual",
	OpAnd: "And", OpOr: "Or", OpXor: "Xor", OpWhere: "Where", OpMax: "Max",
	OpMin: "Min", OpTranspose: "Transpose", OpSoftmax: "Softmax",
	OpLogSoftmax: "LogSoftmax", OpConcat: "Concat", OpGather: "Gather",
	OpGatherElements: "GatherElements",
}
