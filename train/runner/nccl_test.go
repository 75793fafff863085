package runner

import (
	"slices"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/comm/nccl"
	"github.com/lcc-dev/lcc/runtime/cpu"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/train"
)

// oneRankConfigs are the sharded steps a one-rank communicator is tested with:
// ring attention (send/recv), Ulysses (all-to-all), and dilated attention with a
// segment longer than the sequence, so that its rows are all-gathered even on one
// rank; every step all-reduces its gradients.
func oneRankConfigs() map[string]train.Config {
	ring, uly, dil := base(3), base(3), base(3)
	ring.Attention, ring.ShardMode = driver.AttentionOptions{Mode: "dense"}, "ring"
	uly.Attention, uly.ShardMode = driver.AttentionOptions{Mode: "dense"}, "ulysses"
	dil.Attention, dil.ShardMode = driver.AttentionOptions{Mode: "dilated", Segments: []int64{4, 32},
		Dilations: []int64{1, 2}}, "dilated"
	return map[string]train.Config{"ring": ring, "ulysses": uly, "dilated": dil}
}

// trainWith trains c as the one rank of communicator cm.
func trainWith(t *testing.T, c train.Config, cm cpu.Communicator) []float64 {
	t.Helper()
	c.Comm = cm
	r, err := train.Train(c)
	if err != nil {
		t.Fatal(err)
	}
	return r.Losses
}

// TestOneRankComm: the step sharded for one rank, collectives included, trains
// as the unsharded step does (the CPU side of the NCCL test below).
func TestOneRankComm(t *testing.T) {
	for name, c := range oneRankConfigs() {
		got := trainWith(t, c, comm.NewWorld(1, time.Second).Endpoint(0))
		want, err := train.Train(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want.Losses {
			if d := relErr(got[i], want.Losses[i]); !(d <= 1e-5) {
				t.Errorf("%s: step %d: %v sharded for one rank, %v unsharded", name, i+1, got[i],
					want.Losses[i])
			}
		}
	}
}

// TestGPUNCCLOneRank trains through a one-rank NCCL communicator on GPU 0 (every
// collective of the step through NCCL's GPU path) and compares the losses with
// the in-process communicator's, bit for bit. It skips without a GPU or NCCL.
func TestGPUNCCLOneRank(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		t.Skipf("skipping: no usable NCCL: %v", err)
	}
	nc, err := nccl.New(dev, 1, 0, id, nccl.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for name, c := range oneRankConfigs() {
		got := trainWith(t, c, nc)
		want := trainWith(t, c, comm.NewWorld(1, time.Second).Endpoint(0))
		t.Logf("%s: NCCL %v, in-process %v", name, got, want)
		if !slices.Equal(bitsOf(got), bitsOf(want)) {
			t.Errorf("%s: NCCL losses %v differ from the in-process communicator's %v", name, got, want)
		}
	}
}
