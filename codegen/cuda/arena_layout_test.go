package cuda

import (
	"math/rand/v2"
	"testing"
)

// TestLayoutMatchesPlainWalk: the chunked layout gives every query the offset a
// walk over all laid-out buffers in offset order gives, through 1,200
// inserts (so chunks split many times), with lifetimes that are nested (all
// live at the peak, as a training step's activations are) or random.
func TestLayoutMatchesPlainWalk(t *testing.T) {
	defer func(c int) { chunkCap = c }(chunkCap)
	chunkCap = 8
	rng := rand.New(rand.NewPCG(5, 6))
	for _, nested := range []bool{true, false} {
		var lo layout
		var all []placed // in insertion order; the plain walk sorts a copy
		for i := range 1200 {
			size := int64(256 * (1 + rng.IntN(4)))
			f, l := rng.IntN(400), 0
			if nested {
				f, l = i%400, 800-i%400
			} else {
				l = f + rng.IntN(120)
			}
			got := lo.firstFit(size, f, l)
			if want := plainWalk(all, size, f, l); got != want {
				t.Fatalf("nested %v, insert %d: offset %d, the plain walk says %d", nested, i, got, want)
			}
			p := placed{got, got + size, f, l}
			lo.insert(p)
			all = append(all, p)
		}
		if len(lo.chunks) < 1200/chunkCap {
			t.Errorf("%d chunks for 1200 entries: the test does not split chunks", len(lo.chunks))
		}
	}
}

// TestLayoutGapInLiveChunk: a chunk whose buffers are all live can still hold
// a gap that fits (the buffer that filled it is in another chunk and dead by
// then); the walk enters the chunk instead of stepping over it.
func TestLayoutGapInLiveChunk(t *testing.T) {
	defer func(c int) { chunkCap = c }(chunkCap)
	chunkCap = 2
	var lo layout
	lo.insert(placed{0, 1024, 0, 2})    // dead at steps 6-7
	lo.insert(placed{0, 256, 5, 10})    // live
	lo.insert(placed{768, 1024, 5, 10}) // live; the chunks split here
	if len(lo.chunks) != 2 {
		t.Fatalf("%d chunks, want 2", len(lo.chunks))
	}
	if off := lo.firstFit(512, 6, 7); off != 256 {
		t.Errorf("512 bytes at steps 6-7 go at %d, want 256 (the gap between the live buffers)", off)
	}
	if off := lo.firstFit(768, 6, 7); off != 1024 {
		t.Errorf("768 bytes go at %d, want 1024 (above them)", off)
	}
}

// plainWalk is first fit by definition: the lowest offset, 0 or the end of a
// buffer live during [f, l], at which size bytes meet no buffer live then.
func plainWalk(all []placed, size int64, f, l int) int64 {
	best := int64(-1)
	try := func(off int64) {
		for _, p := range all {
			if p.first <= l && f <= p.last && off < p.end && p.off < off+size {
				return
			}
		}
		if best < 0 || off < best {
			best = off
		}
	}
	try(0)
	for _, p := range all {
		if p.first <= l && f <= p.last {
			try(p.end)
		}
	}
	return best
}
