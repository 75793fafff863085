package passes

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// unshardable says why an op has no sequence-sharding rule: shard-sequence
// refuses it, naming the op, when its argument is split along the sequence.
var unshardable = map[ir.Op]string{
	ir.OpConstant: "no arguments", ir.OpFull: "no arguments", ir.OpRange: "no arguments",
	ir.OpGatherElements:              "indices along the sequence would cross ranks",
	ir.OpGatherND:                    "indices along the sequence would cross ranks",
	ir.OpScatterAdd:                  "a backward op; shard-sequence runs before autodiff",
	ir.OpLayerNormGrad:               "a backward op; shard-sequence runs before autodiff",
	ir.OpRMSNormGrad:                 "a backward op; shard-sequence runs before autodiff",
	ir.OpAttentionGrad:               "a backward op; shard-sequence runs before autodiff",
	ir.OpDilatedAttentionGrad:        "a backward op; shard-sequence runs before autodiff",
	ir.OpFusedLinearCrossEntropyGrad: "a backward op; shard-sequence runs before autodiff",
	ir.OpAllGather:                   "already sharded", ir.OpReduceScatter: "already sharded",
	ir.OpAllReduce: "already sharded", ir.OpAllToAll: "already sharded",
	ir.OpRingShift: "already sharded", ir.OpShardPositions: "already sharded",
	ir.OpRingAttention: "already sharded", ir.OpRingAttentionGrad: "already sharded",
	ir.OpShardedDilatedAttention: "already sharded", ir.OpShardedDilatedAttentionGrad: "already sharded",
	ir.OpOffload:          "inserted by insert-checkpoints; shard-sequence runs before autodiff",
	ir.OpPrefetch:         "inserted by insert-checkpoints; shard-sequence runs before autodiff",
	ir.OpFusedElementwise: "made by fuse, which runs after shard-sequence and autodiff",
}

// TestShardRulesCoverEveryOp: every op is elementwise, has a sharding rule, or
// has a written reason for having none, and not two of these.
func TestShardRulesCoverEveryOp(t *testing.T) {
	for _, op := range ir.AllOps() {
		n := 0
		if op.Info().Elementwise {
			n++
		}
		if shardRules[op] != nil {
			n++
		}
		if unshardable[op] != "" {
			n++
		}
		if n != 1 {
			t.Errorf("op %s: elementwise %v, rule %v, reason %q: want exactly one", op,
				op.Info().Elementwise, shardRules[op] != nil, unshardable[op])
		}
	}
}
