package cuda

import (
	"fmt"
	"github.com/lcc-dev/lcc/internal/gputest"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm"
	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// applySwap is the swap kernel's index map in Go: src [P,Q,R] → [Q,P,R].
func applySwap(s *swap3, src []float64) []float64 {
	if s == nil {
		return src
	}
	out := make([]float64, len(src))
	for i := range out {
		r, t := int64(i)%s.R, int64(i)/s.R
		p, q := t%s.P, t/s.P
		out[i] = src[(p*s.Q+q)*s.R+r]
	}
	return out
}

// simulate runs layout l on every rank's input as the executor does: the swap
// before, NCCL's semantics (rank-major blocks, sums in rank order), the swap after.
func simulate(l collLayout, xs [][]float64) [][]float64 {
	n := len(xs)
	ts := make([][]float64, n)
	for r, x := range xs {
		ts[r] = applySwap(l.pre, x)
	}
	c := int(l.coll.Count)
	outs := make([][]float64, n)
	for r := range outs {
		var out []float64
		switch l.coll.Op {
		case "all_reduce":
			out = slices.Clone(ts[0])
			for _, t := range ts[1:] {
				for i, v := range t {
					switch l.coll.Reduce {
					case "max":
						out[i] = max(out[i], v)
					case "min":
						out[i] = min(out[i], v)
					default:
						out[i] += v
					}
				}
			}
		case "all_gather":
			for _, t := range ts {
				out = append(out, t...)
			}
		case "reduce_scatter":
			out = make([]float64, c)
			for _, t := range ts {
				for i := range out {
					out[i] += t[r*c+i]
				}
			}
		case "all_to_all":
			for _, t := range ts {
				out = append(out, t[r*c:(r+1)*c]...)
			}
		case "send_recv":
			out = slices.Clone(ts[(r-int(l.coll.Shift)+n)%n])
		}
		outs[r] = applySwap(l.post, out)
	}
	return outs
}

// TestCollectiveLayouts replays every collective's GPU layout (swaps around the
// NCCL call) on 2 and 3 simulated ranks and compares with the CPU interpreter's
// collectives, bit for bit: the layouts NCCL cannot check on one GPU.
func TestCollectiveLayouts(t *testing.T) {
	type tc struct {
		op    ir.Op
		attrs func(n int) ir.Attrs
		shape func(n int) []int64
	}
	cases := []tc{
		{ir.OpAllReduce, func(n int) ir.Attrs { return ir.A("op", "sum", "ranks", n) },
			func(int) []int64 { return []int64{2, 3} }},
		{ir.OpAllReduce, func(n int) ir.Attrs { return ir.A("op", "max", "ranks", n) },
			func(int) []int64 { return []int64{5} }},
		{ir.OpAllGather, func(n int) ir.Attrs { return ir.A("axis", 0, "ranks", n) },
			func(int) []int64 { return []int64{2, 3} }},
		{ir.OpAllGather, func(n int) ir.Attrs { return ir.A("axis", 1, "ranks", n) },
			func(int) []int64 { return []int64{2, 3, 4} }},
		{ir.OpAllGather, func(n int) ir.Attrs { return ir.A("axis", 2, "ranks", n) },
			func(int) []int64 { return []int64{2, 3, 4} }},
		{ir.OpReduceScatter, func(n int) ir.Attrs { return ir.A("axis", 0, "ranks", n) },
			func(n int) []int64 { return []int64{int64(2 * n), 3} }},
		{ir.OpReduceScatter, func(n int) ir.Attrs { return ir.A("axis", 1, "ranks", n) },
			func(n int) []int64 { return []int64{2, int64(3 * n), 2} }},
		{ir.OpAllToAll, func(n int) ir.Attrs { return ir.A("split_axis", 2, "concat_axis", 1, "ranks", n) },
			func(n int) []int64 { return []int64{1, 3, int64(2 * n), 2} }},
		{ir.OpAllToAll, func(n int) ir.Attrs { return ir.A("split_axis", 1, "concat_axis", 2, "ranks", n) },
			func(n int) []int64 { return []int64{2, int64(3 * n), 2, 2} }},
		{ir.OpAllToAll, func(n int) ir.Attrs { return ir.A("split_axis", 0, "concat_axis", 0, "ranks", n) },
			func(n int) []int64 { return []int64{int64(2 * n), 3} }},
		{ir.OpRingShift, func(n int) ir.Attrs { return ir.A("shift", 1, "ranks", n) },
			func(int) []int64 { return []int64{4} }},
		{ir.OpRingShift, func(n int) ir.Attrs { return ir.A("shift", -1, "ranks", n) },
			func(int) []int64 { return []int64{2, 2} }},
	}
	for _, n := range []int{2, 3} {
		for _, c := range cases {
			b := ir.NewBuilder("coll")
			x := b.Input("x", ir.T(tensor.F64, c.shape(n)...))
			b.Output("y", b.Apply1(c.op, c.attrs(n), x))
			f, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprint(c.op, " ", c.attrs(n))
			l, err := layoutOf(f.Body[0])
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(n), uint64(c.op)))
			xs := make([][]float64, n)
			want := make([][]float64, n)
			in := make([]*tensor.Tensor, n)
			for r := range xs {
				in[r] = tensor.New(tensor.F64, c.shape(n)...)
				for i := range in[r].F {
					in[r].F[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(5)-2))
				}
				xs[r] = in[r].F
			}
			err = comm.NewWorld(n, 0).Run(func(e *comm.Endpoint) error {
				o, err := interp.Run(f, map[string]*tensor.Tensor{"x": in[e.Rank()]},
					interp.Options{Precision: tensor.F64, Comm: e})
				if err == nil {
					want[e.Rank()] = o["y"].F
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := simulate(l, xs)
			for r := range n {
				if !slices.Equal(got[r], want[r]) {
					t.Errorf("%d ranks, %s: rank %d: layout gives\n%v\nthe interpreter\n%v", n, name, r, got[r],
						want[r])
				}
			}
		}
	}
}

// TestCollectiveSteps: collectives lower to collective steps with their swap
// kernels, and shard_positions to a rank-specific kernel.
func TestCollectiveSteps(t *testing.T) {
	b := ir.NewBuilder("coll")
	x := b.Input("x", ir.T(tensor.F32, 2, 3, 4))
	g := b.Apply1(ir.OpAllGather, ir.A("axis", 1, "ranks", 2), x)
	b.Output("y", b.Apply1(ir.OpAllReduce, ir.A("op", "sum", "ranks", 2), g))
	b.Output("pos", b.Apply1(ir.OpShardPositions, ir.A("total", 8, "ranks", 2, "layout", "zigzag")))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	src := map[int]string{}
	for _, rank := range []int{0, 1} {
		p, err := Build(f, Options{Arch: "sm_90", Rank: rank})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, s := range p.Plan.Steps {
			k := s.Kind + ":" + s.Op
			if s.Kind == "collective" {
				k += ":" + s.Coll.Op
			}
			kinds = append(kinds, k)
		}
		// The gather's wait comes before its swap reads it; the all-reduce's is
		// deferred past the next kernel to the end: they overlap.
		want := "collective:all_gather:all_gather wait:all_gather kernel:swap " +
			"collective:all_reduce:all_reduce kernel:shard_positions wait:all_reduce"
		if got := strings.Join(kinds, " "); got != want {
			t.Errorf("rank %d: steps %s, want %s", rank, got, want)
		}
		for _, k := range p.Kernels {
			if k.Op == "shard_positions" {
				src[rank] = k.Body()
			}
		}
	}
	// Zigzag on 2 ranks of 8: rank 0 holds 0,1 and 6,7; rank 1 holds 2,3 and 4,5.
	if !strings.Contains(src[0], "j < 2 ? (0 + (j - 0)) : (6 + (j - 2))") ||
		!strings.Contains(src[1], "j < 2 ? (2 + (j - 0)) : (4 + (j - 2))") {
		t.Errorf("shard_positions kernels:\n%s\n%s", src[0], src[1])
	}
	if _, err := Build(f, Options{Arch: "sm_90", Rank: 2}); err == nil ||
		!strings.Contains(err.Error(), "rank 2, but the program has 2 ranks") {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

// TestCollectiveOverlapArena: a GEMM between an all-reduce and its wait runs
// while NCCL reads the all-reduce's input, so the arena must not give the GEMM's
// result that memory (the wait step keeps it alive).
func TestCollectiveOverlapArena(t *testing.T) {
	b := ir.NewBuilder("overlap")
	x := b.Input("x", ir.T(tensor.F32, 64, 64))
	w := b.Input("w", ir.T(tensor.F32, 64, 64))
	s := b.Apply1(ir.OpMul, nil, x, x)
	a := b.Apply1(ir.OpAllReduce, ir.A("op", "sum", "ranks", 2), s)
	m := b.Apply1(ir.OpMatMul, nil, x, w)
	b.Output("y", b.Apply1(ir.OpAdd, nil, a, m))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(f, Options{Arch: "sm_90"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, st := range p.Plan.Steps {
		kinds = append(kinds, st.Kind)
	}
	if got := strings.Join(kinds, " "); got != "kernel collective gemm wait kernel" {
		t.Fatalf("steps %s, want the GEMM between the all-reduce and its wait", got)
	}
	offs, _ := PlanArena(p.Plan)
	id := func(v *ir.Value) int {
		for i, n := range f.Body {
			for _, r := range n.Results {
				if r == v {
					return len(f.Params) + i // values are numbered params first, as ir.Print does
				}
			}
		}
		return -1
	}
	is, im := id(s), id(m)
	bs, bm := p.Plan.Buffers[is].Bytes, p.Plan.Buffers[im].Bytes
	if offs[is] < offs[im]+bm && offs[im] < offs[is]+bs {
		t.Errorf("the all-reduce's input [%d,+%d) and the GEMM's result [%d,+%d) share memory", offs[is],
			bs, offs[im], bm)
	}
}

// TestCollectiveKernelsCompile compiles the swap and shard_positions kernels
// (f32 and bf16 storage, every layout) with NVRTC, when it can be loaded.
func TestCollectiveKernelsCompile(t *testing.T) {
	b := ir.NewBuilder("coll")
	x := b.Input("x", ir.T(tensor.F32, 2, 6, 4))
	b.Output("g", b.Apply1(ir.OpAllGather, ir.A("axis", 1, "ranks", 2), x))
	b.Output("rs", b.Apply1(ir.OpReduceScatter, ir.A("axis", 1, "ranks", 2), x))
	b.Output("a2a", b.Apply1(ir.OpAllToAll, ir.A("split_axis", 1, "concat_axis", 2, "ranks", 2), x))
	b.Output("zz", b.Apply1(ir.OpShardPositions, ir.A("total", 8, "ranks", 2, "layout", "zigzag",
		"outer", 2, "inner", 3)))
	b.Output("ct", b.Apply1(ir.OpShardPositions, ir.A("total", 8, "ranks", 2, "layout", "contiguous")))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	// Every collective is a step of the plan, and the inner-axis collectives and
	// the position tables need kernels of their own: those are what NVRTC compiles.
	var progs []*Program
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		p, err := Build(f, Options{Arch: "compute_80", Storage: st, Rank: 1})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, step := range p.Plan.Steps {
			kinds[step.Kind]++
		}
		if kinds["kernel"] == 0 || len(p.Kernels) == 0 {
			t.Fatalf("%v: no kernels for the swaps and position tables (steps %v)", st, kinds)
		}
		if len(p.Plan.Steps)-kinds["kernel"] < 3 {
			t.Errorf("%v: %d steps besides kernels, want the 3 collectives (steps %v)", st,
				len(p.Plan.Steps)-kinds["kernel"], kinds)
		}
		progs = append(progs, p)
	}
	if _, err := rcuda.NVRTCVersion(); err != nil {
		gputest.Skipf(t, "skipping the compile: no NVRTC: %v", err)
	}
	cache, err := rcuda.OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range progs {
		for _, k := range p.Kernels {
			if _, err := cache.Get(k.Source, k.Name+".cu", "compute_80", nil); err != nil {
				t.Errorf("kernel %s: %v", k.Name, err)
			}
			n++
		}
	}
	t.Logf("compiled %d kernels", n)
}
