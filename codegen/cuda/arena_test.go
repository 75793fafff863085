package cuda

import (
	"cmp"
	"math/rand/v2"
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

// TestPlanArenaFirstFit: on random plans, buffers live at one time never share
// bytes, and each sits at the lowest offset its placement order allows (largest
// first, ties by id): no lower candidate (0, or the end of an earlier-placed
// buffer live with it) is free of the earlier-placed buffers live with it.
func TestPlanArenaFirstFit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n, steps := 2+rng.IntN(40), 1+rng.IntN(20)
		pl := &LaunchPlan{}
		for id := range n {
			kind := []string{"value", "temp", "param", "const"}[rng.IntN(4)]
			pl.Buffers = append(pl.Buffers, Buffer{ID: id, Kind: kind, Bytes: int64(1 + rng.IntN(4)*300)})
		}
		for range steps {
			pl.Steps = append(pl.Steps, Step{Args: []int{rng.IntN(n), rng.IntN(n)}})
		}
		offs, peak := PlanArena(pl)
		first, last := lifetimes(pl)
		size := func(id int) int64 { return (pl.Buffers[id].Bytes + ArenaAlign - 1) / ArenaAlign * ArenaAlign }
		var order []int
		for id := range n {
			if offs[id] >= 0 {
				order = append(order, id)
			}
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pl.Buffers[b].Bytes, pl.Buffers[a].Bytes) })
		live := func(a, b int) bool { return first[a] <= last[b] && first[b] <= last[a] }
		fits := func(id int, off int64, before []int) bool {
			for _, p := range before {
				if live(id, p) && off < offs[p]+size(p) && offs[p] < off+size(id) {
					return false
				}
			}
			return true
		}
		for i, id := range order {
			if offs[id]+size(id) > peak || !fits(id, offs[id], order[:i]) {
				t.Fatalf("buffer %d at %d overlaps a buffer live with it (peak %d)", id, offs[id], peak)
			}
			cands := []int64{0}
			for _, p := range order[:i] {
				cands = append(cands, offs[p]+size(p))
			}
			for _, c := range cands {
				if c < offs[id] && fits(id, c, order[:i]) {
					t.Fatalf("buffer %d at %d could go at %d", id, offs[id], c)
				}
			}
		}
	}
}
