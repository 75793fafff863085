package runner

import (
	"fmt"
	"sync"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm/devlocal"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
)

// SharedGPU trains cfg with cfg.Ranks ranks in this process, one goroutine per
// rank, all on GPU 0: each rank has its own executor sessions and stream, and
// the collectives run through runtime/comm/devlocal (device-to-device copies
// between the ranks' buffers) instead of NCCL, which refuses two ranks on one
// GPU. It is a test and development mode (`lcc train --shared-gpu`): the
// sharded step's kernels, transfers and events run as on N GPUs, on one. It
// returns rank 0's result, after checking that every rank saw the same losses.
func SharedGPU(cfg train.Config, timeout time.Duration, storage tensor.DType) (*train.Result, error) {
	n, timeout := max(cfg.Ranks, 1), orDefault(timeout)
	dir, err := cuda.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	cache, err := cuda.OpenCache(dir)
	if err != nil {
		return nil, err
	}
	w := devlocal.NewWorld(n, timeout, cache)
	res := make([]*train.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			res[r], errs[r] = sharedRank(cfg, w, r, n, storage)
			if errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
				w.Abort(errs[r])
			}
		})
	}
	wg.Wait()
	for _, err := range errs { // the first failure, not the aborts it caused
		if err != nil {
			return nil, err
		}
	}
	return agreed(res)
}

// sharedRank is rank r of SharedGPU.
func sharedRank(cfg train.Config, w *devlocal.World, r, n int, storage tensor.DType) (*train.Result, error) {
	dev, err := cuda.Open(0)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	c, err := w.Comm(dev, r)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return trainOn(cfg, dev, c, n, storage)
}
