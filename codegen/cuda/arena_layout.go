package cuda

import (
	"math"
	"slices"
)

// This file is PlanArena's record of the buffers laid out so far: their
// offsets and lifetimes in offset order, cut into chunks that summarise their
// entries, so that the first-fit walk (see firstFit) steps over a chunk whose
// buffers are all dead at the time, or all live but packed too tightly for the
// new buffer, without visiting them. A step of 100,000 nodes lays out tens of
// thousands of buffers, nearly all live at the peak; walking them one by one
// made the layout quadratic.

// placed is one buffer laid out: bytes [off, end) from step first to last.
type placed struct {
	off, end    int64
	first, last int
}

// chunkCap is the number of entries a chunk holds before it splits in two (a
// variable for the tests, which split small chunks).
var chunkCap = 512

// chunk is a run of entries in offset order with what the walk needs of them.
type chunk struct {
	ps []placed
	// The extremes of the entries' lifetimes.
	minFirst, maxFirst, minLast, maxLast int
	// maxEnd is the highest end; gap bounds every gap of the entries' union
	// above the first entry's offset (p.off − the highest end before p).
	maxEnd, gap int64
}

// summarise recomputes c's summary from its entries.
func (c *chunk) summarise() {
	c.minFirst, c.maxFirst, c.minLast, c.maxLast = math.MaxInt, math.MinInt, math.MaxInt, math.MinInt
	c.maxEnd, c.gap = math.MinInt64, math.MinInt64
	for i, p := range c.ps {
		c.minFirst, c.maxFirst = min(c.minFirst, p.first), max(c.maxFirst, p.first)
		c.minLast, c.maxLast = min(c.minLast, p.last), max(c.maxLast, p.last)
		if i > 0 {
			c.gap = max(c.gap, p.off-c.maxEnd)
		}
		c.maxEnd = max(c.maxEnd, p.end)
	}
}

// layout is the entries of every chunk, in offset order.
type layout struct{ chunks []*chunk }

// firstFit returns the lowest offset at which size bytes overlap no entry live
// at some step of [f, l]: a walk up the entries that skips the dead ones and
// stops at the first gap that fits. (Entries at one offset may be in any order:
// the walk's result does not depend on it.)
func (lo *layout) firstFit(size int64, f, l int) int64 {
	var off int64
	for _, c := range lo.chunks {
		if c.maxLast < f || c.minFirst > l {
			continue // every entry is dead during [f, l]
		}
		if c.maxFirst <= l && c.minLast >= f && off+size > c.ps[0].off && c.gap < size {
			// Every entry is live, none can be fitted before, and no gap
			// between them fits: the walk ends the chunk above all of them.
			off = max(off, c.maxEnd)
			continue
		}
		for _, p := range c.ps {
			if p.first > l || f > p.last {
				continue
			}
			if off+size <= p.off {
				return off
			}
			off = max(off, p.end)
		}
	}
	return off
}

// insert adds p in offset order.
func (lo *layout) insert(p placed) {
	// The last chunk that starts at or below p.off (the first when none does).
	i, _ := slices.BinarySearchFunc(lo.chunks, p.off, func(c *chunk, off int64) int {
		if c.ps[0].off <= off {
			return -1
		}
		return 1
	})
	if i == 0 {
		if len(lo.chunks) == 0 {
			lo.chunks = []*chunk{{}}
		}
		i = 1
	}
	c := lo.chunks[i-1]
	at, _ := slices.BinarySearchFunc(c.ps, p.off, func(q placed, off int64) int {
		if q.off <= off {
			return -1
		}
		return 1
	})
	c.ps = slices.Insert(c.ps, at, p)
	if len(c.ps) <= chunkCap {
		c.summarise()
		return
	}
	half := &chunk{ps: slices.Clone(c.ps[chunkCap/2:])}
	c.ps = slices.Clip(c.ps[:chunkCap/2])
	c.summarise()
	half.summarise()
	lo.chunks = slices.Insert(lo.chunks, i, half)
}
