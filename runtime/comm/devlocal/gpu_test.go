package devlocal

// Tests named TestGPU* need a GPU and skip, saying why, without one.

import (
	"fmt"
	"github.com/lcc-dev/lcc/internal/gputest"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm/commtest"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// TestGPUCollectives runs every device collective on 2 and 4 ranks sharing GPU
// 0, outputs poisoned first, and compares each rank's result with the same
// collective computed on the host (sums in rank order: bit for bit).
func TestGPUCollectives(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	dev.Close()
	cache, err := cuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n, " ranks"), func(t *testing.T) {
			w := NewWorld(n, 30*time.Second, cache)
			const m = 1000 // elements per rank and block
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					errs[r] = collectivesRank(w, r, m)
					if errs[r] != nil {
						w.Abort(errs[r])
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// collectivesRank is rank r of TestGPUCollectives: commtest's device script, as
// every transport of comm.Device runs it.
func collectivesRank(w *World, r, m int) error {
	dev, err := cuda.Open(0)
	if err != nil {
		return err
	}
	defer dev.Close()
	c, err := w.Comm(dev, r)
	if err != nil {
		return err
	}
	defer c.Close()
	return commtest.DeviceScript(dev, c, m)
}
