package passes

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/tensor"
)

// A Llama-like block: RoPE table from constant positions, causal attention.
const shardSrc = `func @blk(%0: f32[batch=1,seq=16,8] input "x", %1: f32[8,8] weight "w", %2: f32[1,4] weight "inv") {
  %3 = matmul(%0, %1) : f32[1,16,8]
  %4 = reshape(%3) {shape=[1,16,2,4]} : f32[1,16,2,4]
  %5 = constant() {value=f32[16,1]{0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0}} : f32[16,1]
  %6 = mul(%5, %2) : f32[16,4]
  %7 = cos(%6) : f32[16,4]
  %8 = transpose(%4) {perm=[0,2,1,3]} : f32[1,2,16,4]
  %9 = mul(%8, %7) : f32[1,2,16,4]
  %10 = transpose(%9) {perm=[0,2,1,3]} : f32[1,16,2,4]
  %11, %12 = attention(%10, %4, %4) {causal, scale=0.5} : f32[1,16,2,4], f32[1,2,16]
  %13 = reshape(%11) {shape=[16,8]} : f32[16,8]
  %14 = reduce_mean(%13) {axes=[0,1]} : f32[]
  return %11 "o", %14 "m"
}
`

func TestShardSequenceRing(t *testing.T) {
	f, err := ir.Parse(shardSrc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Shard(f, ShardConfig{Ranks: 4, Mode: ShardRing})
	if err != nil {
		t.Fatal(err)
	}
	got := ir.Print(f)
	for _, want := range []string{
		`f32[batch=1,seq=4,8] input "x"`,
		// The RoPE positions are cut at the constant, so cos runs on 4 rows.
		`shard_positions() {inner=1, layout="zigzag", outer=1, ranks=4, total=16} : i64[4]`,
		`cos(`, `: f32[4,4]`,
		`ring_attention(`, `layout="zigzag", ranks=4, scale=0.5} : f32[1,4,2,4], f32[1,2,4]`,
		// The mean over the sequence is a partial sum, all-reduced for the output.
		`all_reduce(`, `return %`, `"m.local"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("sharded IR lacks %q:\n%s", want, got)
		}
	}
	if res.Inputs["x"].Axis != 1 || res.Outputs["o"].Axis != 1 || res.Partial["m"] != "m.local" ||
		res.Layout != ir.LayoutZigzag {
		t.Errorf("result %+v", res)
	}
	if strings.Contains(got, "f32[16,4]") {
		t.Errorf("the whole RoPE table is still computed:\n%s", got)
	}
}

func TestShardSequenceUlysses(t *testing.T) {
	f, err := ir.Parse(shardSrc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Shard(f, ShardConfig{Ranks: 2, Mode: ShardUlysses}); err != nil {
		t.Fatal(err)
	}
	got := ir.Print(f)
	for _, want := range []string{`all_to_all(`, `{concat_axis=1, ranks=2, split_axis=2} : f32[1,16,1,4]`,
		`attention(`, `{concat_axis=2, ranks=2, split_axis=1} : f32[1,8,2,4]`} {
		if !strings.Contains(got, want) {
			t.Errorf("sharded IR lacks %q:\n%s", want, got)
		}
	}
}

func TestShardSequenceErrors(t *testing.T) {
	for _, c := range []struct {
		src, mode string
		ranks     int
		want      string
	}{
		{shardSrc, ShardRing, 3, "divisible by 2·ranks = 6"},
		{shardSrc, ShardUlysses, 4, "2 query heads divisible by --ranks=4"},
		{shardSrc, ShardRing, 0, "--ranks 0"},
		{`func @c(%0: f32[batch=1,seq=8,2] input "x") {
  %1 = cumsum(%0) {axis=1} : f32[1,8,2]
  return %1 "y"
}
`, ShardRing, 2, `cumsum acts along the sequence axis`},
		{`func @s(%0: f32[batch=1,seq=8,2] input "x") {
  %1 = matmul(%0, %0) {transpose_b} : f32[1,8,8]
  return %1 "y"
}
`, ShardRing, 2, "mixes positions"},
	} {
		f, err := ir.Parse(c.src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Shard(f, ShardConfig{Ranks: c.ranks, Mode: c.mode})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s N=%d: error %v, want %q", c.mode, c.ranks, err, c.want)
		}
	}
}

// A sliding-window layer over 16 tokens, 2 heads of 4.
const windowSrc = `func @w(%0: f32[batch=1,seq=16,8] input "x", %1: f32[8,8] weight "w") {
  %2 = matmul(%0, %1) : f32[1,16,8]
  %3 = reshape(%2) {shape=[1,16,2,4]} : f32[1,16,2,4]
  %4, %5 = attention(%3, %3, %3) {causal, scale=0.5, window=3} : f32[1,16,2,4], f32[1,2,16]
  return %4 "o"
}
`

// Ulysses runs the windowed op on whole sequences, window included, and the two
// ranks' outputs are the whole function's halves; ring attention, which has no
// window, is refused with the window named.
func TestShardSequenceWindow(t *testing.T) {
	whole, err := ir.Parse(windowSrc)
	if err != nil {
		t.Fatal(err)
	}
	f := whole.Clone()
	if _, err := Shard(f, ShardConfig{Ranks: 2, Mode: ShardUlysses}); err != nil {
		t.Fatal(err)
	}
	if got := ir.Print(f); !strings.Contains(got, "window=3}") {
		t.Fatalf("the window is lost:\n%s", got)
	}
	rng := rand.New(rand.NewPCG(3, 1))
	x, w := tensor.New(tensor.F32, 1, 16, 8), tensor.New(tensor.F32, 8, 8)
	for _, t := range []*tensor.Tensor{x, w} {
		for i := range t.F {
			t.F[i] = rng.NormFloat64()
		}
	}
	opts := interp.Options{Precision: tensor.F64}
	want, err := interp.Run(whole, map[string]*tensor.Tensor{"x": x, "w": w}, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The contiguous layout: rank r holds tokens 8r .. 8r+7, rows of 8 (x) or 2·4 (o).
	got := make([]*tensor.Tensor, 2)
	err = comm.NewWorld(2, 0).Run(func(e *comm.Endpoint) error {
		r := e.Rank()
		xr := tensor.FromFloats(tensor.F32, []int64{1, 8, 8}, x.F[64*r:64*(r+1)])
		o := opts
		o.Comm = e
		out, err := interp.Run(f, map[string]*tensor.Tensor{"x": xr, "w": w}, o)
		got[r] = out["o"]
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, g := range got {
		part := tensor.FromFloats(tensor.F32, []int64{1, 8, 2, 4}, want["o"].F[64*r:64*(r+1)])
		if e := relErr(g, part); !(e <= 1e-6) { // the collectives carry f32
			t.Errorf("rank %d: relative error %.3g against the whole function", r, e)
		}
	}

	ring, err := ir.Parse(windowSrc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Shard(ring, ShardConfig{Ranks: 2, Mode: ShardRing})
	if err == nil || !strings.Contains(err.Error(), "window=3") || !strings.Contains(err.Error(), "ulysses") {
		t.Errorf("ring: error %v, want one naming the window and Ulysses", err)
	}
}
