package cuda

import (
	"slices"
	"testing"
)

// TestArenaUsage: the occupancy over the schedule of a hand-made plan, and its
// relation to PlanArena's size.
func TestArenaUsage(t *testing.T) {
	pl := &LaunchPlan{Buffers: []Buffer{
		{ID: 0, Kind: "param", Bytes: 1000},  // 1024 aligned, throughout
		{ID: 1, Kind: "value", Bytes: 512},   // steps 0-1
		{ID: 2, Kind: "alias", AliasOf: 1},   // extends 1 to step 2
		{ID: 3, Kind: "temp", Bytes: 256},    // step 1
		{ID: 4, Kind: "value", Bytes: 2048},  // an output: throughout, as PlanArena keeps it
		{ID: 5, Kind: "inline", Bytes: 4096}, // never stored
	}, Steps: []Step{
		{Args: []int{0, 1}}, {Args: []int{1, 3}}, {Args: []int{2, 4, 5}}, {Args: []int{4}},
	}, Outputs: []Output{{Name: "y", ID: 4}}}
	got := ArenaUsage(pl)
	want := []int64{1024 + 2048 + 512, 1024 + 2048 + 512 + 256, 1024 + 2048 + 512, 1024 + 2048}
	if !slices.Equal(got, want) {
		t.Errorf("usage %v, want %v", got, want)
	}
	if _, size := PlanArena(pl); size < slices.Max(got) {
		t.Errorf("arena %d below the live bytes %d", size, slices.Max(got))
	}
}
