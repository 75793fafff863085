package ir

import "fmt"

// Activation offload (docs/design.md §10, "One memory model"): a value the
// backward keeps may wait in pinned host memory instead of on the device, from
// the forward that makes it to the backward that reads it.
//
//	%h = offload(%x) : bf16[1,1048576,1024]    x copied device → host
//	%y = prefetch(%h) : bf16[1,1048576,1024]   h copied host → device
//
// Both are the identity on values: the CPU interpreter copies nothing, and a
// graph computes the same numbers with or without them. On the GPU, offload's
// result lives in host memory (no arena slot) and both copies run on a copy
// stream, overlapped with compute: x's slot is free for reuse once the
// device→host copy is done, and y's slot is live from the prefetch (placed ahead
// of the first reader) to its last reader. A host value is read by prefetch and
// nothing else, which codegen checks. passes.Checkpoint inserts them after
// autodiff, so neither has a gradient rule.

func init() {
	def(OpOffload, OpInfo{Name: "offload", MinArgs: 1, MaxArgs: 1, Infer: inferOffload, NoGrad: true})
	def(OpPrefetch, OpInfo{Name: "prefetch", MinArgs: 1, MaxArgs: 1, Infer: inferPrefetch, NoGrad: true})
}

func inferOffload(n *Node) ([]Type, error) {
	if d := n.Args[0].Def; d != nil && d.Op == OpOffload {
		return nil, fmt.Errorf("argument is already in host memory (an offload's result)")
	}
	return one(n.Args[0].Type), nil
}

func inferPrefetch(n *Node) ([]Type, error) {
	if d := n.Args[0].Def; d == nil || d.Op != OpOffload {
		return nil, fmt.Errorf("argument must be an offload's result (a value in host memory)")
	}
	return one(n.Args[0].Type), nil
}

// IsHost reports whether v lives in host memory: the result of an offload.
func IsHost(v *Value) bool { return v.Def != nil && v.Def.Op == OpOffload }
