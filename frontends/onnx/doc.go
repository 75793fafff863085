// Package onnx decodes and validates ONNX model files for lcc.
//
// Load (or Decode, for bytes already in memory) parses a ModelProto with the
// generated types of package onnxpb, then turns it into a Model: plain Go values
// with tensors decoded into tensor.Tensor, dims that keep their symbolic names
// (dim_param, e.g. "batch", "seq") and nodes sorted topologically. The lowering to
// lcc's IR starts from a Model and may rely on the invariants below; it is also the
// place that reports operators lcc does not implement (see Model.OpsUsed).
//
// Invariants of a Model returned without error:
//   - Graph.Nodes is in topological order: every non-empty node input is a graph
//     input, an initializer or an output of an earlier node. Exporters must write
//     nodes in that order; unsorted acyclic graphs are accepted and sorted stably
//     (a node never moves ahead of an earlier ready node).
//   - Every value is defined once: no two nodes produce the same name and no node
//     output shadows a graph input or an initializer. An empty input or output name
//     means an absent optional value, as in ONNX.
//   - Every initializer and tensor attribute has a supported dtype (f32, f16, bf16,
//     f64, i64, i32, i8, u8, bool) and exactly the number of elements its dims
//     declare; graph inputs and outputs have a supported dtype.
//   - Domain "ai.onnx" is written "" everywhere (Opsets, Node.Domain, OpKey).
//
// What is refused, and why. The input is untrusted: a model file may come from
// anywhere, and decoding must fail with an error, never panic, hang or exhaust
// memory.
//   - Files larger than LoadOptions.MaxFileBytes (2 GiB by default, protobuf's own
//     limit for one message) are refused before they are read.
//   - Sizes are bounded before allocating: dims must be non-negative and their
//     product at most tensor.MaxElements (tensor.Numel), and the bytes present
//     (raw_data, typed fields, or the external file's size) must match the dims
//     before any element buffer is allocated, so a tensor that declares terabytes
//     but carries a few bytes costs nothing.
//   - External data (data_location = EXTERNAL) is read only from regular files
//     inside the model's folder: absolute locations, locations that climb out with
//     "..", and locations with any symbolic link on the way are refused (the link
//     could point anywhere, such as /dev/zero or a secret file), and offset+length
//     must lie inside the file. Files are opened through os.Root as a second line
//     of defence. The optional "checksum" entry is not verified: neither the ONNX
//     reference implementation nor ONNX Runtime does, and the spec does not say
//     what it covers.
//   - The default domain must be imported at an opset from MinOpset to MaxOpset:
//     lcc's op semantics follow those versions, and silently reading a newer
//     opset's ops with older semantics would give wrong numbers. Past
//     SemanticsOpset, each op that ONNX redefined is accepted only at the versions
//     lcc implements; the others are refused by name and version.
//   - Segmented tensors, sparse initializers, string tensors and other dtypes are
//     refused with an error that names the tensor.
//
// Every error names the file (LoadOptions.Source, set by Load to the path) and,
// where one is involved, the node by name and op type; errors wrap one of
// ErrMalformed, ErrUnsupported, ErrInvalidGraph, ErrUnsafePath or ErrTooLarge.
//
// The format is specified by onnx/onnx.proto and docs/IR.md in the ONNX repository
// (https://github.com/onnx/onnx); external data by docs/ExternalData.md.
package onnx
