package cuda

import (
	"slices"
	"testing"
)

// TestPlanWork: a kernel moves its arguments' buffers (an inlined constant
// nothing, an argument twice when it appears twice); a GEMM does 2·M·N·K per
// matrix and moves A and B (once when broadcast) and C (twice when it
// accumulates); a chunked loop reads its share of the buffer it walks and the
// whole of one it always starts at; a wait moves nothing.
func TestPlanWork(t *testing.T) {
	plan := &LaunchPlan{
		Buffers: []Buffer{{ID: 0, Bytes: 100, Kind: "value"}, {ID: 1, Bytes: 200, Kind: "param"},
			{ID: 2, Bytes: 4, Kind: "inline"}, {ID: 3, Bytes: 100, Kind: "alias", AliasOf: 0}},
		Steps: []Step{
			{Kind: "kernel", Kernel: "k", Args: []int{0, 1, 2}},
			{Kind: "kernel", Kernel: "inplace", Args: []int{3, 3}},
			{Kind: "gemm", Args: []int{0, 1, 0}, Gemm: &Gemm{M: 2, N: 3, K: 4, DType: "bf16", CType: "f32"}},
			{Kind: "gemm", Args: []int{0, 1, 0}, Gemm: &Gemm{M: 2, N: 3, K: 4, Batch: 5, StrideA: 8,
				DType: "bf16", Beta: 1}},
			{Kind: "kernel", Kernel: "chunk", Args: []int{0, 1}, Offs: []int64{0, 0}},
			{Kind: "kernel", Kernel: "chunk", Args: []int{0, 1}, Offs: []int64{25, 0}},
			{Kind: "wait", Args: []int{0, 1}},
		},
	}
	want := []Work{
		{Bytes: 300},
		{Bytes: 200},
		{Bytes: (8+12)*2 + 6*4, FLOPs: 48},
		{Bytes: (8*5+12)*2 + 2*6*5*2, FLOPs: 48 * 5},
		{Bytes: 50 + 200},
		{Bytes: 50 + 200},
		{},
	}
	if got := PlanWork(plan); !slices.Equal(got, want) {
		t.Errorf("PlanWork:\n got %v\nwant %v", got, want)
	}
}
