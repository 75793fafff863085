package runner

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/train"
)

const llamaMini = "../../testdata/onnx/llama_mini.onnx"

// base is a fast run: llama_mini on 2×16 tokens.
func base(steps int) train.Config {
	c := train.DefaultConfig()
	c.Model, c.Data = llamaMini, "synthetic:copy"
	c.SeqLen, c.Batch, c.Steps, c.LR, c.Seed, c.Warmup = 16, 2, steps, 3e-3, 7, 1
	c.Version = "test"
	return c
}

// dilated is LongNet attention with a branch whose segment (16) is longer than
// a rank's share of 16 tokens on 2 ranks (8), so the sparse all-gather runs.
var dilated = driver.AttentionOptions{Mode: "dilated", Segments: []int64{4, 16},
	Dilations: []int64{1, 2}}

func relErr(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-30) }

// TestLocalMatchesOneRank trains llama_mini with two in-process ranks, sequence-
// sharded with ring attention and with dilated attention, and compares every
// step's loss with the one-rank run of the same attention.
func TestLocalMatchesOneRank(t *testing.T) {
	cases := []struct {
		name string
		att  driver.AttentionOptions
		mode string
	}{
		{"ring", driver.AttentionOptions{Mode: "dense"}, "ring"},
		{"dilated", dilated, "dilated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			one := base(4)
			one.Attention = c.att
			want, err := train.Train(one)
			if err != nil {
				t.Fatal(err)
			}
			two := one
			two.Ranks, two.ShardMode = 2, c.mode
			got, err := Local(two, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Losses) != len(want.Losses) {
				t.Fatalf("%d losses, want %d", len(got.Losses), len(want.Losses))
			}
			worst := 0.0
			for i := range want.Losses {
				worst = max(worst, relErr(got.Losses[i], want.Losses[i]))
			}
			t.Logf("losses 1 rank %v\n2 ranks %v\nworst relative difference %.2g", want.Losses,
				got.Losses, worst)
			if !(worst <= 1e-5) {
				t.Errorf("2 ranks differ from 1 by %.3g relative (> 1e-5)", worst)
			}
		})
	}
}

// TestDilatedGathers checks that the dilated case above exercises LongNet's sparse
// all-gather: the sharded step communicates k/v rows of its long branch.
func TestDilatedGathers(t *testing.T) {
	c := base(1)
	c.Attention, c.Ranks, c.ShardMode = dilated, 2, "dilated"
	st, err := train.Step(c)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rank == nil {
		t.Fatal("Step with 2 ranks returned no rank program")
	}
	comm := driver.CommunicationOf(st.Func)
	if comm.ByOp[ir.OpShardedDilatedAttention.String()] == 0 ||
		comm.ByOp[ir.OpShardedDilatedAttentionGrad.String()] == 0 {
		t.Errorf("the sharded dilated step gathers nothing: %v", comm.ByOp)
	}
}

// TestLocalErrors: a bad shard mode or an unshardable length fails with the flag.
func TestLocalErrors(t *testing.T) {
	c := base(1)
	c.Ranks, c.ShardMode, c.SeqLen = 2, "ring", 6 // zigzag needs T mod 2N = 0
	_, err := Local(c, time.Second)
	if err == nil || !strings.Contains(err.Error(), "rank") {
		t.Errorf("T=6 on 2 ring ranks: %v", err)
	}
}
