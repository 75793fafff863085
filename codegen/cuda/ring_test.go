package cuda_test

import (
	"github.com/lcc-dev/lcc/internal/gputest"
	"slices"
	"strings"
	"testing"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/internal/attntest"
	"github.com/lcc-dev/lcc/ir"
	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// ringFunc is one rank's causal ring attention forward and backward on [B, L, H, D].
func ringFunc(t *testing.T, ranks int, b, l, h, hkv, d int64, layout string) *ir.Func {
	t.Helper()
	c := attntest.Ring{Ranks: ranks, B: b, L: l, H: h, Hkv: hkv, D: d, Causal: true, Layout: layout}
	return c.RankFunc(t, 0.125)
}

// compileCases compiles with NVRTC 11.8, as CI does without a GPU, every kernel
// of the first and the last rank's plans of each case (runtime/exec runs the
// same cases on the GPU; a middle rank's kernels differ from theirs only in
// baked-in positions) whose op keep accepts, and returns the compiled kernels'
// families.
func compileCases(t *testing.T, cases []attntest.Ring, funcs func(i int) *ir.Func, keep func(op string) bool) []string {
	t.Helper()
	seen := map[string]bool{}
	for i, c := range cases {
		f := funcs(i)
		for _, rank := range []int{0, c.Ranks - 1} {
			p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: c.Storage, Rank: rank})
			if err != nil {
				t.Fatalf("%v rank %d: %v", c, rank, err)
			}
			for _, k := range p.Kernels {
				if seen[k.Name] || !keep(k.Op) {
					continue
				}
				seen[k.Name] = true
				if _, log, err := rcuda.Compile(k.Source, k.Name+".cu", "compute_80", nil); err != nil {
					t.Errorf("%v: %s: %v\n%s", c, k.Name, err, log)
				}
			}
		}
	}
	var ops []string
	for n := range seen {
		ops = append(ops, n[:strings.LastIndex(n, "_")])
	}
	slices.Sort(ops)
	return slices.Compact(ops)
}

// planSummary counts a plan's steps by op, and lists its collectives in order.
func planSummary(p *codegen.Program) (map[string]int, []string) {
	ops := map[string]int{}
	var colls []string
	for _, s := range p.Plan.Steps {
		ops[s.Op]++
		if s.Kind == "collective" || s.Kind == "wait" {
			colls = append(colls, s.Kind+" "+s.Op)
		}
	}
	return ops, colls
}

// TestRingPlan checks the launches of ring attention on 4 ranks: per rank the
// forward runs 4 steps with 3 k/v transfers, the zigzag layout gives every rank
// the same number of visible blocks (2 diagonal, 6 wholly visible: the
// load balance the layout exists for), the backward sends k/v 3 times and
// dk/dv 4 times, every transfer is joined by a wait, and the tiers are chosen
// by storage and head dim.
func TestRingPlan(t *testing.T) {
	const ranks = 4
	f := ringFunc(t, ranks, 1, 64, 2, 2, 64, ir.LayoutZigzag)
	for rank := range ranks {
		p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: tensor.BF16, Rank: rank})
		if err != nil {
			t.Fatal(err)
		}
		ops, colls := planSummary(p)
		if ops["attention.flash.fwd"] != 9 || ops["attention.flash.dq"] != 9 || ops["attention.flash.dkdv"] != 9 {
			t.Errorf("rank %d: fwd %d, dq %d, dkdv %d blocks; want 9 each", rank, ops["attention.flash.fwd"],
				ops["attention.flash.dq"], ops["attention.flash.dkdv"])
		}
		if ops["ring_attention.kv"] != 3+3 || ops["ring_attention_grad.kv"] != 3+3 ||
			ops["ring_attention_grad.dkv"] != 4+4 {
			t.Errorf("rank %d: transfers and waits %v", rank, colls)
		}
		if len(p.Attention) != 2 || p.Attention[1].Kernel != codegen.KernelFlash ||
			p.Attention[1].Op != "ring_attention_grad" {
			t.Errorf("rank %d: attention choices %+v", rank, p.Attention)
		}
		if ops["ring.merge"] != 0 || ops["ring.fwd"] != 0 {
			t.Errorf("rank %d: the bf16 D=64 plan uses the scalar tier: %v", rank, ops)
		}
		// Every collective is joined before its result is read, in order.
		pending := map[int]bool{}
		for i, s := range p.Plan.Steps {
			switch s.Kind {
			case "collective":
				pending[s.Args[1]] = true
			case "wait":
				if !pending[s.Args[1]] {
					t.Fatalf("rank %d: step %d waits for nothing", rank, i)
				}
				delete(pending, s.Args[1])
			default:
				for _, a := range s.Args {
					if pending[a] {
						t.Errorf("rank %d: step %d (%s) reads buffer %d before its transfer is joined", rank, i,
							s.Op, a)
					}
				}
			}
		}
		if len(pending) != 0 {
			t.Errorf("rank %d: transfers never joined: %v", rank, pending)
		}
		// Double buffering: block kernels run between each transfer and its wait
		// (all but the last, which brings dk and dv home after the last block).
		lastBlock := 0
		for i, s := range p.Plan.Steps {
			if strings.HasPrefix(s.Op, "attention.flash.") {
				lastBlock = i
			}
		}
		for i, s := range p.Plan.Steps {
			if s.Kind != "collective" || i > lastBlock {
				continue
			}
			blocks := 0
			for _, u := range p.Plan.Steps[i+1:] {
				if u.Kind == "wait" && u.Args[1] == s.Args[1] {
					break
				}
				if strings.HasPrefix(u.Op, "attention.flash.") {
					blocks++
				}
			}
			if blocks == 0 {
				t.Errorf("rank %d: %s at step %d overlaps no block kernel", rank, s.Op, i)
			}
		}
	}
	// fp32 storage and a head dim that is no multiple of 8 take the scalar kernels and the merge.
	for _, c := range []struct {
		st tensor.DType
		d  int64
	}{{tensor.F32, 64}, {tensor.BF16, 12}} {
		f := ringFunc(t, 2, 2, 16, 2, 1, c.d, ir.LayoutZigzag)
		p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: c.st, Rank: 1})
		if err != nil {
			t.Fatal(err)
		}
		ops, _ := planSummary(p)
		if len(p.Attention) != 2 || p.Attention[0].Kernel != codegen.KernelScalar || p.Attention[0].Why == "" {
			t.Errorf("%v D=%d: attention choices %+v; want scalar with a reason, twice", c.st, c.d, p.Attention)
		}
		// Rank 1 of 2, zigzag: chunks 1 and 2 of 4; step 0 sees (1,1) (2,1) (2,2),
		// step 1 holds rank 0's chunks 0 and 3: (1,0) (2,0).
		if ops["ring.fwd"] != 5 || ops["ring.merge"] != 5 || ops["ring.dq"] != 5 || ops["ring.dkdv"] != 5 {
			t.Errorf("%v D=%d: scalar blocks %v", c.st, c.d, ops)
		}
		if ops["attention.flash.fwd"] != 0 {
			t.Errorf("%v D=%d: uses the tensor-core tier", c.st, c.d)
		}
	}
}

// TestRingKernelsCompile compiles, with NVRTC 11.8, every kernel of ring
// attention's plans in both tiers, for every case runtime/exec runs on the GPU.
func TestRingKernelsCompile(t *testing.T) {
	if _, err := rcuda.NVRTCVersion(); err != nil {
		gputest.Skipf(t, "skipping: no NVRTC library: %v", err)
	}
	ops := compileCases(t, attntest.RingCases, func(i int) *ir.Func { return attntest.RingCases[i].RankFunc(t, 0.3) },
		func(op string) bool {
			return strings.HasPrefix(op, "ring.") || strings.HasPrefix(op, "attention.flash")
		})
	for _, want := range []string{"ring_merge", "ring_fwd", "ring_dq", "ring_dkdv", "ring_add", "ring_move",
		"ring_delta", "attention_flash_fwd", "attention_flash_dkdv", "attention_flash_dq"} {
		if !slices.Contains(ops, want) {
			t.Errorf("no %s kernel compiled (have %v)", want, ops)
		}
	}
}

// dilatedFunc is one rank's causal sharded dilated attention forward and backward.
func dilatedFunc(t *testing.T, ranks int, b, l, h, hkv, d int64, seg, dil []int64, offsets string) *ir.Func {
	t.Helper()
	c := attntest.Dilated{Ring: attntest.Ring{Ranks: ranks, B: b, L: l, H: h, Hkv: hkv, D: d, Causal: true,
		Layout: ir.LayoutContiguous}, Segments: seg, Dilations: dil, Offsets: offsets}
	return c.RankFunc(t, 0.125)
}

// TestShardedDilatedPlan checks LongNet's sharding on 4 ranks of 32 positions:
// the branch of segment 16 is local (no communication), the branches of
// segments 64 (two ranks a segment) and 256 (the whole sequence) gather their
// selected k/v once in the forward and once in the backward, and reduce-scatter
// their dk/dv once; rank r attends to the r mod 2 + 1 and r + 1 ranks' rows
// before it, so its block count grows with its place in the segment; every
// gather is queued before the local branch's kernels, which overlap it.
func TestShardedDilatedPlan(t *testing.T) {
	f := dilatedFunc(t, 4, 1, 32, 4, 2, 64, []int64{16, 64, 256}, []int64{1, 2, 4}, "paper")
	for rank := range 4 {
		p, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Storage: tensor.BF16, Rank: rank})
		if err != nil {
			t.Fatal(err)
		}
		ops, colls := planSummary(p)
		gathers, scatters := 0, 0
		for _, s := range p.Plan.Steps {
			if s.Kind == "collective" {
				switch s.Coll.Op {
				case "all_gather":
					gathers++
				case "reduce_scatter":
					scatters++
				}
			}
		}
		if gathers != 4 || scatters != 2 {
			t.Errorf("rank %d: %d gathers, %d reduce-scatters; want 4, 2 (%v)", rank, gathers, scatters, colls)
		}
		blocks := (rank%2 + 1) + (rank + 1)
		// The forward: the local branch's kernel plus one per far block; the
		// backward as many dQ kernels.
		if ops["attention.flash.fwd"] != 1+blocks || ops["attention.flash.dq"] != 1+blocks {
			t.Errorf("rank %d: %d forward and %d dQ kernels; want %d", rank, ops["attention.flash.fwd"],
				ops["attention.flash.dq"], 1+blocks)
		}
		if ops["ring.merge"] != 2 || ops["dilated.scatter"] != 6 {
			t.Errorf("rank %d: %d merges, %d scatters; want 2, 6", rank, ops["ring.merge"], ops["dilated.scatter"])
		}
		// The gathers are queued before the local branch's kernels, which run
		// while the rows travel.
		for i, s := range p.Plan.Steps {
			if s.Kind != "collective" || s.Coll.Op != "all_gather" {
				continue
			}
			kernels := 0
			for _, u := range p.Plan.Steps[i+1:] {
				if u.Kind == "wait" && u.Args[1] == s.Args[1] {
					break
				}
				if strings.HasPrefix(u.Op, "attention.flash.") {
					kernels++
				}
			}
			if kernels == 0 {
				t.Errorf("rank %d: %s at step %d overlaps no attention kernel", rank, s.Op, i)
			}
		}
	}
	// A branch whose segment is not whole shares is refused, naming it.
	f = dilatedFunc(t, 4, 1, 32, 4, 2, 64, []int64{48}, []int64{1}, "paper")
	if _, err := codegen.Build(f, codegen.Options{Arch: "compute_80", Rank: 0}); err == nil ||
		!strings.Contains(err.Error(), "segment 48") {
		t.Errorf("segment 48 on shares of 32: %v", err)
	}
}

// TestShardedDilatedKernelsCompile compiles, with NVRTC 11.8, every kernel of
// the sharded dilated plans in both tiers, for every case runtime/exec runs on
// the GPU.
func TestShardedDilatedKernelsCompile(t *testing.T) {
	if _, err := rcuda.NVRTCVersion(); err != nil {
		gputest.Skipf(t, "skipping: no NVRTC library: %v", err)
	}
	var rings []attntest.Ring
	for _, c := range attntest.DilatedCases {
		rings = append(rings, c.Ring)
	}
	ops := compileCases(t, rings, func(i int) *ir.Func { return attntest.DilatedCases[i].RankFunc(t, 0.3) },
		func(string) bool { return true })
	for _, want := range []string{"dilated_select", "dilated_scatter", "dilated_fwd", "dilated_dq", "dilated_dkdv",
		"ring_merge"} {
		if !slices.Contains(ops, want) {
			t.Errorf("no %s kernel compiled (have %v)", want, ops)
		}
	}
}

// TestRingDocsRefused: ring attention over packed documents has no GPU kernel,
// so codegen refuses it naming the node, rather than running the blocks
// without the document mask.
func TestRingDocsRefused(t *testing.T) {
	c := attntest.Ring{Ranks: 2, B: 1, L: 64, H: 2, Hkv: 2, D: 64, Causal: true, Layout: ir.LayoutContiguous}
	bd := ir.NewBuilder("ring_docs")
	q := bd.Input("q", ir.T(tensor.F32, 1, 64, 2, 64))
	st := bd.Input("starts", ir.T(tensor.I64, 1, 64))
	bd.Output("o", bd.Apply(ir.OpRingAttention, c.Attrs(0.125).With("docs", true), q, q, q, st)[0])
	f, err := bd.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = codegen.Build(f, codegen.Options{Arch: "sm_90a", Storage: tensor.BF16, Rank: 0})
	if err == nil || !strings.Contains(err.Error(), "ring attention over packed documents") ||
		!strings.Contains(err.Error(), f.Body[0].Where()) {
		t.Errorf("got %v, want the refusal naming the node", err)
	}
}
