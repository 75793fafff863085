// Package runner starts the ranks of a multi-rank training run (docs/design.md §10,
// "Multi-GPU runner"). `--ranks=N` means N ranks in compile, check and train
// alike; the runner has two forms that run the same rank-specific step:
//
//   - Local: one process, one goroutine per rank, connected by runtime/comm's
//     in-process communicator (on the CPU); LocalGPU: one goroutine per GPU,
//     each with its NCCL rank.
//   - Process: one process per rank, started by `torchrun --no-python lcc train`
//     or srun. Rank 0 listens on MASTER_ADDR:MASTER_PORT; the ranks meet through
//     runtime/comm/rendezvous and, on the CPU, exchange tensors over
//     runtime/comm/tcp.
//   - ProcessGPU: the same on GPU LOCAL_RANK: rank 0's NCCL unique id travels
//     over the TCP mesh, which stays open beside NCCL to name a rank that dies,
//     and the step runs on the GPU executor with its collectives on NCCL
//     (runtime/comm/nccl). With WORLD_SIZE=1 this is the one-rank NCCL run.
//   - SharedGPU: a test and development mode, N goroutine ranks on GPU 0 with
//     runtime/comm/devlocal's device communicator instead of NCCL.
//
// Every rank builds the same sharded step (train.Step: the compile pipeline's
// program for one rank, with shard-sequence and all-reduced gradients), feeds it its
// share of each batch and ends the step with the all-reduced gradient, so the
// weights and optimizer state are the same bits on every rank: the run is the
// one-rank run up to the order of floating-point sums.
//
// Checkpoints: because every rank holds the same state, a multi-rank checkpoint
// is one consolidated checkpoint that rank 0 writes (weights, optimizer state,
// data position, with "ranks" in its settings). Every rank resumes from it and
// the ranks check that they resumed from the same step; a resume on the same rank
// count continues bit for bit.
//
// Faults: a rank that fails aborts the others. In-process, the World aborts every
// endpoint at once; across processes, a failing rank tells its peers why before
// it closes its connections, a closed connection fails the peers' next wait at
// once naming the rank, and a silent rank is caught by the communicator's
// watchdog (Timeout). No rank waits forever.
package runner

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/comm/nccl"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
)

// DefaultTimeout is the watchdog of collectives and of the rendezvous: a rank
// that waits this long for a peer gives up with an error naming it.
const DefaultTimeout = 60 * time.Second

// orDefault is timeout, or DefaultTimeout when none (<= 0) was given.
func orDefault(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return DefaultTimeout
	}
	return timeout
}

// Local trains cfg with cfg.Ranks ranks in this process, one goroutine per rank,
// connected by an in-process communicator whose waits time out after timeout
// (DefaultTimeout when 0). It returns rank 0's result, after checking that every
// rank saw the same losses.
func Local(cfg train.Config, timeout time.Duration) (*train.Result, error) {
	if cfg.Ranks < 2 {
		return train.Train(cfg)
	}
	timeout = orDefault(timeout)
	res := make([]*train.Result, cfg.Ranks)
	w := comm.NewWorld(cfg.Ranks, timeout)
	err := w.Run(func(e *comm.Endpoint) error {
		c := cfg
		c.Comm = e
		r, err := train.Train(c)
		if err != nil {
			return fmt.Errorf("rank %d: %w", e.Rank(), err)
		}
		res[e.Rank()] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return agreed(res)
}

// agreed returns rank 0's result once every rank's losses are its bits.
func agreed(res []*train.Result) (*train.Result, error) {
	for r := 1; r < len(res); r++ {
		if err := sameLosses(res[0], res[r], r); err != nil {
			return nil, err
		}
	}
	return res[0], nil
}

// sameLosses checks the invariant that every rank computes the same loss bits.
func sameLosses(a, b *train.Result, rank int) error {
	if len(a.Losses) != len(b.Losses) {
		return fmt.Errorf("lcc: BUG: rank %d ran %d steps, rank 0 %d", rank, len(b.Losses), len(a.Losses))
	}
	for i := range a.Losses {
		if math.Float64bits(a.Losses[i]) != math.Float64bits(b.Losses[i]) {
			return fmt.Errorf("lcc: BUG: step %d: rank %d's loss %v differs from rank 0's %v",
				a.FirstStep+i+1, rank, b.Losses[i], a.Losses[i])
		}
	}
	return nil
}

// LocalGPU trains cfg with cfg.Ranks ranks in this process, one goroutine per
// GPU (rank r on GPU r), each with its NCCL rank (one unique id shared in
// process) and a GPU executor that runs the step's collectives on it, storing
// f32 values as storage. A rank that fails aborts the others' NCCL
// communicators, so none waits for it. It returns rank 0's result, after
// checking that every rank saw the same losses.
func LocalGPU(cfg train.Config, timeout time.Duration, storage tensor.DType) (*train.Result, error) {
	n, timeout := max(cfg.Ranks, 1), orDefault(timeout)
	count, err := cuda.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("--device=cuda: %w", err)
	}
	if count < n {
		return nil, fmt.Errorf("--ranks=%d --device=cuda: one GPU per rank, but %d GPU(s) are visible "+
			"(--shared-gpu runs every rank on GPU 0, a test and development mode)", n, count)
	}
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		return nil, fmt.Errorf("--device=cuda: %w", err)
	}
	var (
		mu    sync.Mutex
		comms = make([]*nccl.Comm, n)
		first error
	)
	fail := func(err error) { // the first failure aborts every rank's NCCL
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
			for _, c := range comms {
				if c != nil {
					c.Abort(err)
				}
			}
		}
	}
	res := make([]*train.Result, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			if err := localGPURank(cfg, r, n, id, timeout, storage, &res[r], func(c *nccl.Comm) {
				mu.Lock()
				comms[r] = c
				aborted := first
				mu.Unlock()
				if aborted != nil {
					c.Abort(aborted)
				}
			}); err != nil {
				fail(fmt.Errorf("rank %d: %w", r, err))
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return agreed(res)
}

// localGPURank is rank r of LocalGPU; joined reports its communicator.
func localGPURank(cfg train.Config, r, n int, id cuda.NCCLUniqueID, timeout time.Duration,
	storage tensor.DType, res **train.Result, joined func(*nccl.Comm)) error {
	dev, err := cuda.Open(r)
	if err != nil {
		return err
	}
	defer dev.Close()
	nc, err := nccl.New(dev, n, r, id, nccl.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	joined(nc)
	defer nc.Close()
	*res, err = trainOn(cfg, dev, nc, n, storage)
	return err
}

// trainOn trains cfg as one of n ranks on dev, the step on a GPU executor whose
// collectives run on c, storing f32 values as storage (the optimizer in f32).
func trainOn(cfg train.Config, dev *cuda.Device, c comm.Device, n int, storage tensor.DType) (*train.Result, error) {
	step := exec.NewSession(dev, exec.Options{Storage: storage, Comm: c})
	defer step.Close()
	opt := step
	if storage != tensor.F32 {
		opt = exec.NewSession(dev, exec.Options{Storage: tensor.F32})
		defer opt.Close()
	}
	cfg.Ranks, cfg.Comm, cfg.Run, cfg.RunOptimizer, cfg.Adopt = n, c, step.Run, opt.Run, step.Adopt
	cfg.GPU = step.GPU()
	return train.Train(cfg)
}
