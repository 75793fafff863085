package runner

import (
	"github.com/lcc-dev/lcc/internal/gputest"
	"testing"
	"time"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
)

// twoRankConfigs are the sequence-sharded steps of the shared-GPU tests on 2 ranks.
func twoRankConfigs() map[string]train.Config {
	ring, dil := base(4), base(4)
	ring.Attention, ring.ShardMode, ring.Ranks = driver.AttentionOptions{Mode: "dense"}, "ring", 2
	dil.Attention, dil.ShardMode, dil.Ranks = dilated, "dilated", 2
	return map[string]train.Config{"ring": ring, "dilated": dil}
}

// TestTwoRankStepLowers: every rank's build of the 2-rank sharded step lowers
// whole to the GPU (ring attention's blocks and transfers, LongNet's sparse
// all-gather included), in fp32 and bf16.
func TestTwoRankStepLowers(t *testing.T) {
	for name, c := range twoRankConfigs() {
		w := comm.NewWorld(2, 0)
		for r := range 2 {
			c.Comm = w.Endpoint(r)
			st, err := train.Step(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, storage := range []tensor.DType{tensor.F32, tensor.BF16} {
				p, err := codegen.Build(st.Func, codegen.Options{Arch: "sm_90", Storage: storage, Rank: r})
				if err != nil {
					t.Fatalf("%s, rank %d, %v: %v", name, r, storage, err)
				}
				moves := 0
				for _, s := range p.Plan.Steps {
					if s.Kind == "collective" && (s.Coll.Op == "send_recv" || s.Coll.Op == "all_gather") {
						moves++
					}
				}
				if moves == 0 {
					t.Errorf("%s, rank %d, %v: no k/v transfer", name, r, storage)
				}
			}
		}
	}
}

// TestGPUSharedRanks trains llama_mini sequence-sharded (ring attention, and
// LongNet's dilated attention with a far branch) over 2 ranks that share
// GPU 0 (SharedGPU: devlocal's device communicator) in fp32, and compares every
// step's loss with the 2-rank CPU run (runner.Local) within 1e-4 relative.
func TestGPUSharedRanks(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	dev.Close()
	for name, c := range twoRankConfigs() {
		t.Run(name, func(t *testing.T) {
			want, err := Local(c, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got, err := SharedGPU(c, 5*time.Minute, tensor.F32)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("GPU %v\nCPU %v", got.Losses, want.Losses)
			for i := range want.Losses {
				if d := relErr(got.Losses[i], want.Losses[i]); !(d <= 1e-4) {
					t.Errorf("step %d: GPU loss %v, CPU %v (relative %.2g)", i+1, got.Losses[i], want.Losses[i], d)
				}
			}
		})
	}
}
