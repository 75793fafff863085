package flash_test

import (
	"testing"

	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/codegen/cuda/flash"
)

// tier2Variants are the tier-2 (sm_90a) descriptors the tests render: dense
// causal and full attention with both head dims, grouped-query heads, a
// dilated branch accumulating with the fused backward (a row chunk that reads a
// longer lse, the first branch storing its sums), and a ring block.
var tier2Variants = []struct {
	name string
	d    flash.Desc
}{
	{"dense-causal-d128", flash.Desc{B: 1, T: 1000, S: 1000, Hq: 4, Hkv: 4, D: 128, Causal: true, Tier: 2}},
	{"dense-causal-d64-gqa", flash.Desc{B: 2, T: 1000, S: 1000, Hq: 4, Hkv: 2, D: 64, Causal: true, Tier: 2}},
	{"dense-full-d128-gqa", flash.Desc{B: 2, T: 300, S: 517, Hq: 4, Hkv: 2, D: 128, Tier: 2}},
	{"dilated-fused-d128", flash.Desc{B: 1, T: 4096, S: 4096, LT: 16384, Hq: 8, Hkv: 8, D: 128, Causal: true,
		W: 1024, R: 4, Accumulate: true, DQ: flash.DQFused, First: true, Tier: 2}},
	{"ring-block-d64", flash.Desc{B: 1, T: 512, S: 512, Hq: 4, Hkv: 4, D: 64, Causal: true, QPos: 512,
		Accumulate: true, Tier: 2}},
}

// tier2Kernels renders the forward and, where the backward is fused, the
// dK/dV/dQ kernel of d: the kernels that tier 2 renders on wgmma.
func tier2Kernels(t *testing.T, d flash.Desc) []flash.Kernel {
	t.Helper()
	kf, err := flash.Forward(d)
	if err != nil {
		t.Fatal(err)
	}
	ks := []flash.Kernel{kf}
	if d.Defaults().Fused() {
		kb, err := flash.DKDV(d)
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, kb)
	}
	for _, k := range ks {
		if k.Arch != flash.ArchSM90a {
			t.Fatalf("%s: arch %q, want %s", k.Op, k.Arch, flash.ArchSM90a)
		}
	}
	return ks
}

// TestTier2Golden: the tier-2 kernels render exactly as the golden files in
// testdata/golden (update with go test ./codegen/cuda/flash -run Golden -update).
// One variant, a forward and a fused backward, holds the kernel text: the other
// variants differ from it only in their descriptor's #defines, and
// TestNVRTCCompileTier2 compiles every one of them.
func TestTier2Golden(t *testing.T) {
	v := tier2Variants[0]
	for _, k := range tier2Kernels(t, v.d) {
		cudatest.Golden(t, "tier2-"+v.name+"-"+k.Op[len("attention.flash."):], k.Source())
	}
}

// TestTier1Golden: tier 1's kernels (mma.sync, sm_80 and later) of dense causal
// attention render exactly as their golden files: the forward, the fused
// dK/dV/dQ kernel, and the split backward's dK/dV and dQ kernels (ring blocks
// and dilated branches run those). Their other variants differ only in the
// descriptor's #defines, and TestNVRTCCompile compiles every one.
func TestTier1Golden(t *testing.T) {
	d := flash.Desc{B: 1, T: 1000, S: 1000, Hq: 4, Hkv: 4, D: 128, Causal: true, Tier: 1}
	split := d
	split.DQ = flash.DQSplit
	for _, c := range []struct {
		name string
		gen  func(flash.Desc) (flash.Kernel, error)
		d    flash.Desc
	}{{"fwd", flash.Forward, d}, {"dkdvdq", flash.DKDV, d}, {"dkdv", flash.DKDV, split}, {"dq", flash.DQ, split}} {
		k, err := c.gen(c.d)
		if err != nil {
			t.Fatal(err)
		}
		if k.Arch != "" {
			t.Errorf("%s: arch %q, want any sm_80 or later", k.Op, k.Arch)
		}
		cudatest.Golden(t, "tier1-dense-causal-d128-"+c.name, k.Source())
	}
}
