package exec

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/gputest"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/comm/nccl"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// TestCheckRanks: a sharded program needs a communicator of its ranks.
func TestCheckRanks(t *testing.T) {
	b := ir.NewBuilder("coll")
	x := b.Input("x", ir.T(tensor.F32, 4))
	b.Output("y", b.Apply1(ir.OpAllReduce, ir.A("op", "sum", "ranks", 2), x))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRanks(f, nil); err == nil || !strings.Contains(err.Error(), "no communicator") {
		t.Errorf("no communicator: %v", err)
	}
}

// TestGPUCollectivesOneRank runs every collective through a one-rank NCCL
// communicator on GPU 0, between compute kernels (the stream ordering) and with
// the swap kernels of inner axes, against the CPU interpreter.
func TestGPUCollectivesOneRank(t *testing.T) {
	dev := devicetest.Open(t)
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		gputest.Skipf(t, "skipping: no usable NCCL: %v", err)
	}
	nc, err := nccl.New(dev, 1, 0, id, nccl.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b := ir.NewBuilder("coll")
	x := b.Input("x", ir.T(tensor.F32, 2, 6, 4))
	sq := b.Apply1(ir.OpMul, nil, x, x)
	with := func(kv ...any) ir.Attrs { return ir.A(append(kv, "ranks", 1)...) }
	b.Output("all_gather", b.Apply1(ir.OpAdd, nil,
		b.Apply1(ir.OpAllGather, with("axis", 1), sq), x))
	b.Output("reduce_scatter", b.Apply1(ir.OpAdd, nil,
		b.Apply1(ir.OpReduceScatter, with("axis", 2), sq), x))
	b.Output("all_reduce", b.Apply1(ir.OpNeg, nil, b.Apply1(ir.OpAllReduce, with("op", "max"), sq)))
	b.Output("all_to_all", b.Apply1(ir.OpNeg, nil,
		b.Apply1(ir.OpAllToAll, with("split_axis", 1, "concat_axis", 2), sq)))
	b.Output("ring_shift", b.Apply1(ir.OpNeg, nil, b.Apply1(ir.OpRingShift, with("shift", 1), sq)))
	b.Output("positions", b.Apply1(ir.OpShardPositions, with("total", 8, "layout", "zigzag",
		"outer", 2, "inner", 3)))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	in := randomInputs(f, 5)
	compare(t, dev, f, in, Options{Comm: nc}, 0)
	compare(t, dev, f, in, Options{Comm: nc, Storage: tensor.BF16}, 2e-2)
}

// TestGPUCollectivesTwoRanks runs every collective, with inner axes (the swap
// kernels) and between compute kernels, on two GPUs of one host, each with its
// NCCL rank, against the CPU interpreter's two in-process ranks. It skips
// without two GPUs and NCCL.
func TestGPUCollectivesTwoRanks(t *testing.T) {
	n, err := cuda.DeviceCount()
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	gputest.NeedGPUs(t, n, 2, "each rank on its own GPU")
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		gputest.Skipf(t, "skipping: no usable NCCL: %v", err)
	}
	const ranks = 2
	b := ir.NewBuilder("coll2")
	x := b.Input("x", ir.T(tensor.F32, 2, 6, 4))
	sq := b.Apply1(ir.OpMul, nil, x, x)
	with := func(kv ...any) ir.Attrs { return ir.A(append(kv, "ranks", ranks)...) }
	b.Output("all_gather", b.Apply1(ir.OpAllGather, with("axis", 1), sq))
	b.Output("reduce_scatter", b.Apply1(ir.OpReduceScatter, with("axis", 1), sq))
	b.Output("all_reduce", b.Apply1(ir.OpNeg, nil, b.Apply1(ir.OpAllReduce, with("op", "sum"), sq)))
	b.Output("all_to_all", b.Apply1(ir.OpAllToAll, with("split_axis", 1, "concat_axis", 2), sq))
	b.Output("ring_shift", b.Apply1(ir.OpRingShift, with("shift", 1), sq))
	b.Output("positions", b.Apply1(ir.OpShardPositions, with("total", 8, "layout", "zigzag",
		"outer", 2, "inner", 3)))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	in := make([]map[string]*tensor.Tensor, ranks)
	for r := range in {
		in[r] = randomInputs(f, uint64(10+r))
	}
	want := make([]map[string]*tensor.Tensor, ranks)
	err = comm.NewWorld(ranks, 0).Run(func(e *comm.Endpoint) error {
		o, err := interp.Run(f, in[e.Rank()], interp.Options{Comm: e})
		want[e.Rank()] = o
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]map[string]*tensor.Tensor, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			dev, err := cuda.Open(r)
			if err != nil {
				errs[r] = err
				return
			}
			defer dev.Close()
			nc, err := nccl.New(dev, ranks, r, id, nccl.Options{Timeout: 60 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			defer nc.Close()
			got[r], errs[r] = RunWith(dev, f, in[r], Options{Comm: nc, Poison: true,
				CacheDir: t.TempDir()})
		})
	}
	wg.Wait()
	for r := range ranks {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for name, w := range want[r] {
			// Sums of two ranks may round differently in NCCL's order: 1e-6.
			if e := relErr(got[r][name], w); e > 1e-6 {
				t.Errorf("rank %d: %s: relative error %.3g (gpu %v, cpu %v)", r, name, e, head(got[r][name]),
					head(w))
			}
		}
	}
}
