package interp

import (
	"runtime"
	"sync"
)

// Parallel loops. A kernel that splits its work hands each goroutine a disjoint,
// contiguous range of output elements (or rows) and leaves every element's own
// computation, and so its order of summation, exactly as in a serial loop: results
// are bit-for-bit those of one goroutine, whatever the core count.

// grain is the number of cheap element operations (an add, a copy, a rounding)
// below which a loop stays on one goroutine: starting and joining one costs about
// as much as a few thousand of them.
const grain = 1 << 14

// parallelRange runs body on contiguous ranges [lo, hi) covering [0, n), one per
// goroutine, using up to GOMAXPROCS goroutines when n·cost (in cheap element
// operations) is worth splitting. The caller's goroutine runs the first range. A
// panic in any range is re-raised in the caller, where the interpreter turns it
// into an error naming the node.
func parallelRange(n, cost int, body func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n*max(cost, 1)/grain, n)
	if workers <= 1 {
		if n > 0 {
			body(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var panicked any
	part := func(w int) {
		defer func() {
			if r := recover(); r != nil {
				mu.Lock()
				if panicked == nil {
					panicked = r
				}
				mu.Unlock()
			}
		}()
		body(n*w/workers, n*(w+1)/workers)
	}
	for w := 1; w < workers; w++ {
		wg.Go(func() { part(w) })
	}
	part(0)
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
