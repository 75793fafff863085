package ir

// This file is the communication column of the op table: the bytes one GPU sends
// for a node of a collective or sequence-parallel op, over its ranks, for the
// report's communication figures. Every op that declares a ranks attribute has
// a rule (a table test checks it); other ops send nothing.

// commFunc counts the bytes one GPU sends for node n over r > 1 ranks.
type commFunc func(n *Node, r int64) int64

// CommBytes is the number of bytes one GPU sends for n (0 for ops that do not
// communicate and for a single rank).
func (n *Node) CommBytes() int64 {
	rule := commRules[n.Op]
	r := int64(Ranks(n))
	if rule == nil || r <= 1 {
		return 0
	}
	return rule(n, r)
}

var commRules = map[Op]commFunc{
	OpAllGather:                   commAllGather,
	OpReduceScatter:               commReduceScatter,
	OpAllToAll:                    commReduceScatter,
	OpAllReduce:                   commAllReduce,
	OpRingShift:                   commRingShift,
	OpRingAttention:               commRingAttention,
	OpRingAttentionGrad:           commRingAttentionGrad,
	OpShardedDilatedAttention:     commShardedDilatedAttention,
	OpShardedDilatedAttentionGrad: commShardedDilatedAttentionGrad,
	// shard_positions computes this rank's positions from its rank alone.
	OpShardPositions: func(*Node, int64) int64 { return 0 },
}

// argBytes is the size of n's argument i.
func argBytes(n *Node, i int) int64 { return n.Args[i].Type.Bytes() }

// all_gather: every other rank's share of the result.
func commAllGather(n *Node, r int64) int64 {
	return (r - 1) * argBytes(n, 0)
}

// reduce_scatter and all_to_all (ring algorithms): (N−1)/N of the input.
func commReduceScatter(n *Node, r int64) int64 {
	return (r - 1) * argBytes(n, 0) / r
}

// all_reduce (ring): a reduce-scatter and an all-gather.
func commAllReduce(n *Node, r int64) int64 {
	return 2 * (r - 1) * argBytes(n, 0) / r
}

// ring_shift: the whole input to the next rank.
func commRingShift(n *Node, r int64) int64 {
	return argBytes(n, 0)
}

// ring_attention: k and v for N−1 steps.
func commRingAttention(n *Node, r int64) int64 {
	return (r - 1) * (argBytes(n, 1) + argBytes(n, 2))
}

// ring_attention_grad: see the comment in the body.
func commRingAttentionGrad(n *Node, r int64) int64 {
	// k, v for N−1 steps, dk, dv for N (the last brings them home).
	return (r-1)*(argBytes(n, 1)+argBytes(n, 2)) + r*(argBytes(n, 1)+argBytes(n, 2))
}

// sharded_dilated_attention: the all-gathers of the selected k and v rows.
func commShardedDilatedAttention(n *Node, r int64) int64 {
	return (r - 1) * dilatedGathered(n, r)
}

// sharded_dilated_attention_grad: see the comment in the body.
func commShardedDilatedAttentionGrad(n *Node, r int64) int64 {
	// The gather again, then the gathered rows' dk, dv back to their owners.
	return 2 * (r - 1) * dilatedGathered(n, r)
}

// dilatedGathered is the bytes of k and v one rank contributes to the all-gathers
// of a sharded dilated attention: for each branch whose segments do not tile a
// rank's block, the rows each kv head's offsets select, ≈ L/r per offset.
func dilatedGathered(n *Node, ranks int64) int64 {
	q, k := n.Args[0].Type, n.Args[1].Type
	b, l, hq, hkv, d := k.Shape[0], k.Shape[1], q.Shape[2], k.Shape[2], k.Shape[3]
	segs, dils := n.AttrInts("segments"), n.AttrInts("dilations")
	offsets := n.AttrString("offsets")
	var rows int64
	for i := range segs {
		w, r := segs[i], dils[i]
		if w < l*ranks && l%w == 0 {
			continue // local branch
		}
		for hk := range hkv {
			offs := map[int64]bool{}
			g := hq / hkv
			for h := hk * g; h < (hk+1)*g; h++ {
				offs[HeadOffset(offsets, h, hq, r)] = true
			}
			rows += int64(len(offs)) * ((l + r - 1) / r)
		}
	}
	return 2 * b * rows * d * int64(k.DType.Size())
}
