package flash

import (
	"github.com/lcc-dev/lcc/internal/gputest"
	"strings"
	"sync"
	"testing"

	rcuda "github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// variants are the descriptors CI compiles: dense causal and not, both head
// dims, grouped-query, a dilated branch with accumulation (split, and fused
// as a row chunk reading a longer lse), a ring block.
func variants() []Desc {
	var ds []Desc
	for _, dim := range []int{64, 128} {
		ds = append(ds,
			Desc{B: 1, T: 1000, S: 1000, Hq: 4, Hkv: 4, D: dim, Causal: true},
			Desc{B: 1, T: 1000, S: 1000, Hq: 4, Hkv: 4, D: dim, Causal: true, DQ: DQSplit},
			Desc{B: 2, T: 300, S: 517, Hq: 4, Hkv: 2, D: dim},
		)
	}
	ds = append(ds,
		Desc{B: 1, T: 4096, S: 4096, Hq: 8, Hkv: 4, D: 128, Causal: true, W: 1024, R: 4, Accumulate: true,
			PerMember: true, Member: 1},
		Desc{B: 1, T: 4096, S: 4096, LT: 16384, Hq: 8, Hkv: 8, D: 128, Causal: true, W: 1024, R: 4, Accumulate: true,
			DQ: DQFused, First: true},
		Desc{B: 1, T: 512, S: 512, Hq: 4, Hkv: 4, D: 64, Causal: true, QPos: 512, KPos: 0, Accumulate: true},
		// Packed documents: dense causal with the fused backward, GQA and a ragged tail.
		Desc{B: 2, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 128, Causal: true, Docs: true},
		Desc{B: 1, T: 777, S: 777, Hq: 8, Hkv: 1, D: 64, Causal: true, Docs: true},
		// Sliding windows: alone (GQA, a window not a multiple of any tile, a
		// ragged tail), and with packed documents.
		Desc{B: 2, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 128, Causal: true, Window: 300},
		Desc{B: 1, T: 777, S: 777, Hq: 8, Hkv: 1, D: 64, Causal: true, Window: 129, Docs: true},
		// Head dims padded to the kernels' 64 or 128: 96 dense causal and GQA, 80
		// bidirectional with a batch, 32 with a window, 112 on a dilated branch.
		Desc{B: 1, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 96, Causal: true},
		Desc{B: 2, T: 300, S: 517, Hq: 4, Hkv: 2, D: 80},
		Desc{B: 1, T: 777, S: 777, Hq: 4, Hkv: 4, D: 32, Causal: true, Window: 100},
		Desc{B: 1, T: 4096, S: 4096, Hq: 8, Hkv: 8, D: 112, Causal: true, W: 1024, R: 4, Accumulate: true},
		// Head dim 256 (tier 1 only): dense causal with GQA, bidirectional with a
		// batch, a window, and 192 padded to 256.
		Desc{B: 1, T: 1000, S: 1000, Hq: 8, Hkv: 2, D: 256, Causal: true},
		Desc{B: 2, T: 300, S: 517, Hq: 2, Hkv: 2, D: 256},
		Desc{B: 1, T: 777, S: 777, Hq: 4, Hkv: 4, D: 256, Causal: true, Window: 200},
		Desc{B: 1, T: 500, S: 500, Hq: 2, Hkv: 1, D: 192, Causal: true},
		// Split heads (tier 2's grouped-query backward, one CTA per query head).
		Desc{B: 2, T: 1000, S: 1000, Hq: 8, Hkv: 2, D: 128, Causal: true, SplitHeads: true, Tier: 2},
		Desc{B: 1, T: 777, S: 777, Hq: 4, Hkv: 1, D: 64, Causal: true, SplitHeads: true, Tier: 2, Window: 100},
		Desc{B: 1, T: 1000, S: 1000, Hq: 6, Hkv: 2, D: 96, Causal: true, SplitHeads: true, Docs: true},
		Desc{B: 2, T: 300, S: 517, Hq: 4, Hkv: 2, D: 256, SplitHeads: true})
	// Views: q, k and v read from one packed qkv buffer (rows of 8·128 with a
	// gap), their gradients written into another; with split heads too.
	qkv := func(off int64) Layout { return Layout{Off: off, Row: 8*128 + 8, Batch: 1000 * (8*128 + 8)} }
	views := Views{Q: qkv(0), K: qkv(4 * 128), V: qkv(6 * 128), DQ: qkv(0), DK: qkv(4 * 128), DV: qkv(6 * 128)}
	ds = append(ds,
		Desc{B: 2, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 128, Causal: true, Views: views},
		Desc{B: 2, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 128, Causal: true, SplitHeads: true, Tier: 2, Views: views})
	return ds
}

func kernels(t *testing.T, d Desc) []Kernel {
	t.Helper()
	var ks []Kernel
	gens := []func(Desc) (Kernel, error){Forward, Delta, DKDV}
	if !d.Docs && d.Window == 0 && d.KD() <= 128 && !d.SplitHeads { // these have only the fused backward, whose dK/dV kernel computes dQ
		gens = append(gens, DQ)
	}
	if d.Defaults().Fused() {
		gens = append(gens, DQBound, ConvertDQ)
	}
	if d.SplitHeads {
		gens = append(gens, DKVReduce)
	}
	for _, f := range gens {
		k, err := f(d)
		if err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		ks = append(ks, k)
	}
	return append(ks, Convert(1024), Fill(1000, 0xff800000))
}

// TestDeterministic: the same descriptor renders the same bytes, and every
// parameter of the descriptor that changes code changes the text.
func TestDeterministic(t *testing.T) {
	d := Desc{B: 1, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 128, Causal: true}
	a, b := kernels(t, d), kernels(t, d)
	for i := range a {
		if a[i].Source() != b[i].Source() {
			t.Fatalf("kernel %s renders differently twice", a[i].Op)
		}
		if strings.Contains(a[i].Source(), "@KERNEL@") || strings.Contains(a[i].Source(), "<no value>") {
			t.Fatalf("kernel %s: unrendered text", a[i].Op)
		}
	}
	e := d
	e.QPos = 7
	if k1, k2 := kernels(t, d)[0], kernels(t, e)[0]; k1.Name() == k2.Name() {
		t.Fatal("QPos does not change the forward kernel")
	}
	e = d
	e.Docs = true
	for i, k := range kernels(t, e)[:3] { // forward, delta, fused dK/dV
		if k.Name() == a[i].Name() {
			t.Errorf("Docs does not change the %s kernel", k.Op)
		}
		if want := k.Op != "attention.flash.delta"; want != (k.Params[len(k.Params)-1].Name == "starts") {
			t.Errorf("%s: parameters %v: the doc starts should be last exactly when the kernel masks", k.Op, k.Params)
		}
	}
}

// TestRejects: unsupported descriptors are errors naming the problem.
func TestRejects(t *testing.T) {
	for _, c := range []struct {
		d    Desc
		want string
	}{
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 100}, "head dim 100"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 264}, "head dim 264"},
		{Desc{B: 1, T: 8, S: 8, Hq: 2, Hkv: 2, D: 64, SplitHeads: true, Tier: 2}, "split heads"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 256, Tier: 2}, "above 128"},
		{Desc{B: 1, T: 64, S: 64, Hq: 1, Hkv: 1, D: 256, Causal: true, W: 16, R: 2, Accumulate: true}, "above 128"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Causal: true, Window: 4, W: 4, R: 2}, "sliding window"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Window: 4}, "sliding window"},
		{Desc{B: 1, T: 8, S: 8, Hq: 3, Hkv: 2, D: 64}, "whole group"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Br: 40}, "Br=40"},
		{Desc{B: 1, T: 8, S: 9, Hq: 1, Hkv: 1, D: 64, W: 4, R: 2}, "as many keys"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, DType: tensor.F16}, "storage f16"},
		{Desc{B: 1, T: 8, S: 8, Hq: 2, Hkv: 1, D: 64, W: 4, R: 2, Accumulate: true, DQ: DQFused}, "fused dQ"},
		{Desc{B: 1, T: 8, S: 8, LT: 4, Hq: 1, Hkv: 1, D: 64}, "lse and delta of 4 rows"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, W: 4, R: 2, Accumulate: true, First: true}, "first"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, BwdBr: 16, BwdBc: 256, DQ: DQFused}, "backward tiles 16×256"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Tier: 3}, "tier 3"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Tier: 2, Stages: 2}, "the forward needs at least 3"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Tier: 2, Br: 96, Bc: 64}, "tier 2 forward tile 96×64"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Tier: 2, BwdBr: 32, BwdBc: 128, DQ: DQFused},
			"tier 2 fused backward tiles 32×128"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Docs: true}, "document mask"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Causal: true, Docs: true, W: 4, R: 2, Accumulate: true},
			"document mask"},
		{Desc{B: 1, T: 8, S: 8, Hq: 1, Hkv: 1, D: 64, Causal: true, Docs: true, DQ: DQSplit}, "document mask"},
	} {
		_, err := Forward(c.d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error with %q", c.d, err, c.want)
		}
	}
}

// TestTierDefaults: tier 2 takes its own forward tiles (three warpgroups; two
// for a D=64 accumulating forward, whose 192-row tile spills) and stages, and its
// kernels say they need sm_90a; tier 1's kernels need no particular arch.
func TestTierDefaults(t *testing.T) {
	for _, c := range []struct {
		d              Desc
		br, bc, stages int
	}{
		{Desc{B: 1, T: 64, S: 64, Hq: 1, Hkv: 1, D: 128, Tier: 2}, 192, 64, 3},
		{Desc{B: 1, T: 64, S: 64, Hq: 1, Hkv: 1, D: 64, Tier: 2}, 192, 128, 3},
		{Desc{B: 1, T: 64, S: 64, Hq: 1, Hkv: 1, D: 64, Tier: 2, Accumulate: true}, 128, 128, 3},
	} {
		d := c.d.Defaults()
		if d.Br != c.br || d.Bc != c.bc || d.Stages != c.stages {
			t.Errorf("%+v: tiles %d×%d, %d stages; want %d×%d, %d", c.d, d.Br, d.Bc, d.Stages, c.br, c.bc, c.stages)
		}
		k, err := Forward(c.d)
		if err != nil {
			t.Fatal(err)
		}
		if k.Arch != ArchSM90a || k.Block[0] != uint32(d.Br/64*128) {
			t.Errorf("%+v: arch %q, %d threads", c.d, k.Arch, k.Block[0])
		}
	}
	k, err := Forward(Desc{B: 1, T: 64, S: 64, Hq: 1, Hkv: 1, D: 128})
	if err != nil || k.Arch != "" {
		t.Errorf("tier 1 forward: arch %q, %v", k.Arch, err)
	}
	// The split backward of a tier-2 descriptor (ring blocks) is tier 1's.
	k, err = DKDV(Desc{B: 1, T: 64, S: 64, Hq: 1, Hkv: 1, D: 64, Tier: 2, Accumulate: true, DQ: DQSplit})
	if err != nil || k.Arch != "" {
		t.Errorf("tier 2 split dK/dV: arch %q, %v", k.Arch, err)
	}
}

// TestNVRTCCompile compiles every variant for compute_80 and sm_90 (CI has
// NVRTC 11.8 and no GPU).
func TestNVRTCCompile(t *testing.T) {
	if _, err := rcuda.NVRTCVersion(); err != nil {
		gputest.Skipf(t, "skipping: no NVRTC library: %v", err)
	}
	seen := map[string]bool{}
	var srcs []Kernel
	for _, d := range variants() {
		for _, k := range kernels(t, d) {
			if !seen[k.Name()] && k.Arch == "" { // sm_90a's are TestNVRTCCompileTier2's
				seen[k.Name()] = true
				srcs = append(srcs, k)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]string, len(srcs)*2)
	sem := make(chan struct{}, 2)
	for i, k := range srcs {
		for j, arch := range []string{"compute_80", "sm_90"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if _, log, err := rcuda.Compile(k.Source(), k.Name()+".cu", arch, nil); err != nil {
					errs[2*i+j] = k.Name() + " " + arch + ": " + err.Error() + "\n" + log
				}
			}()
		}
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
}

func TestMembers(t *testing.T) {
	dense := Desc{B: 1, T: 64, S: 64, Hq: 8, Hkv: 2, D: 64, Causal: true}
	if m := dense.Members(); len(m) != 1 || m[0].PerMember {
		t.Errorf("dense GQA: %d launches, want one whole-group launch", len(m))
	}
	br := dense
	br.W, br.R = 32, 2
	m := br.Members()
	if len(m) != 4 {
		t.Fatalf("dilated GQA (group 4): %d launches, want 4", len(m))
	}
	for i, d := range m {
		if !d.PerMember || d.Member != i {
			t.Errorf("launch %d: PerMember=%v Member=%d", i, d.PerMember, d.Member)
		}
	}
	mha := br
	mha.Hkv = 8
	if m := mha.Members(); len(m) != 1 || m[0].PerMember {
		t.Errorf("dilated without GQA: %d launches, want 1", len(m))
	}
}

// TestDefaultTiles: dense D=128 attention picks its forward tiles by the number
// of query tiles; dilated branches keep the 128×32 forward.
func TestDefaultTiles(t *testing.T) {
	for _, c := range []struct {
		d                  Desc
		br, bc, wm, stages int
	}{
		{Desc{B: 1, T: 32768, S: 32768, Hq: 8, Hkv: 8, D: 128, Causal: true}, 256, 32, 2, 3},
		{Desc{B: 1, T: 8192, S: 8192, Hq: 8, Hkv: 8, D: 128, Causal: true}, 128, 64, 1, 2},
		{Desc{B: 1, T: 32768, S: 32768, Hq: 8, Hkv: 8, D: 128, Causal: true, W: 2048, R: 2, Accumulate: true}, 128, 32, 2, 2},
		{Desc{B: 1, T: 131072, S: 131072, Hq: 16, Hkv: 16, D: 64, Causal: true}, 256, 64, 2, 2},
	} {
		d := c.d.Defaults()
		if d.Br != c.br || d.Bc != c.bc || d.WM != c.wm || d.Stages != c.stages {
			t.Errorf("T=%d D=%d W=%d: forward %d×%d/%d stages %d, want %d×%d/%d stages %d",
				c.d.T, c.d.D, c.d.W, d.Br, d.Bc, d.WM, d.Stages, c.br, c.bc, c.wm, c.stages)
		}
	}
}

// TestSplitsHeads: the rule splits a grouped-query backward whose grid has
// fewer CTAs than its tier's GPUs have SMs (two kv heads × 64 key tiles at 8K),
// and not one with enough CTAs (the 1.1B Llama's 4 × 64), nor plain multi-head
// attention, nor a dilated branch.
func TestSplitsHeads(t *testing.T) {
	for _, c := range []struct {
		d    Desc
		want bool
	}{
		{Desc{B: 1, T: 8192, S: 8192, Hq: 32, Hkv: 4, D: 64, Causal: true, Tier: 2}, false},
		{Desc{B: 1, T: 8192, S: 8192, Hq: 16, Hkv: 2, D: 64, Causal: true, Tier: 2}, true},
		{Desc{B: 1, T: 32768, S: 32768, Hq: 8, Hkv: 1, D: 128, Causal: true, Tier: 2}, false}, // 256 key tiles
		{Desc{B: 1, T: 8192, S: 8192, Hq: 24, Hkv: 8, D: 128, Causal: true, Tier: 2}, false},
		{Desc{B: 1, T: 8192, S: 8192, Hq: 8, Hkv: 8, D: 128, Causal: true, Tier: 2}, false},
		{Desc{B: 1, T: 8192, S: 8192, Hq: 32, Hkv: 4, D: 64, Causal: true, Tier: 1}, false},
		{Desc{B: 1, T: 4096, S: 4096, Hq: 16, Hkv: 2, D: 128, Causal: true, Tier: 1}, true}, // 64 < 108
		{Desc{B: 1, T: 8192, S: 8192, Hq: 32, Hkv: 4, D: 64, Causal: true, Tier: 2, W: 2048, R: 2}, false},
	} {
		if got := SplitsHeads(c.d.Defaults()); got != c.want {
			t.Errorf("%+v: splits %v, want %v", c.d, got, c.want)
		}
	}
}
