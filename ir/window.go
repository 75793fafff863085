package ir

import "fmt"

// This file is the one home of sliding-window attention in the IR (Mistral's,
// Gemma's and Qwen's local layers; FlashAttention's window_size=(W−1, 0)). An
// attention or attention_grad node with window = W > 0 is causal and each query
// sees only the last W keys up to itself: query t sees key j iff t − W < j ≤ t.
// Like a document mask it is a first visible key per query, t − W + 1, which is
// non-decreasing in t, so a flash tile decides it from positions alone and the
// tiles wholly outside the window are skipped, not masked. A window combines
// with a document mask (the later of the two starts) and with an explicit mask
// (both must show a key). The attribute is absent, or 0, for full attention.

// Window is n's sliding window W (query t sees keys t−W < j ≤ t), or 0 when n
// attends to every earlier key: any node, 0 for ops without the attribute.
func Window(n *Node) int64 {
	v, _ := n.Attrs.Get("window")
	w, _ := v.(int64)
	return w
}

// checkWindow validates the window attribute of an attention-family node.
func checkWindow(n *Node) error {
	v, ok := n.Attrs.Get("window")
	if !ok {
		return nil
	}
	switch w, _ := v.(int64); {
	case w < 0:
		return fmt.Errorf("window %d: want a positive number of keys (0 or absent: no window)", w)
	case w > 0 && !n.AttrBool("causal"):
		return fmt.Errorf("window %d needs causal attention (a query sees the %d keys up to itself)", w, w)
	}
	return nil
}

// WindowStart is the first key query t sees under window w (0 without one).
func WindowStart(t, w int64) int64 {
	if w <= 0 || t < w {
		return 0
	}
	return t - w + 1
}
