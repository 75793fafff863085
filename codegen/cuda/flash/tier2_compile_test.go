package flash

import (
	"sync"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda/nvrtctest"
)

// TestNVRTCCompileTier2 compiles every sm_90a kernel of the variants rendered at
// tier 2 with an NVRTC of 12.0 or later: CI's NVRTC 12.4 (LCC_NVRTC12), or the
// default NVRTC where it is new enough. It skips where there is none. Tier 2's
// kernels of another architecture (the split backward is tier 1's) are compiled
// by TestNVRTCCompile.
func TestNVRTCCompileTier2(t *testing.T) {
	n := nvrtctest.NVRTC12(t)
	seen := map[string]bool{}
	var srcs []Kernel
	for _, d := range variants() {
		d.Tier = 2
		if _, err := Forward(d); err != nil {
			t.Logf("%+v: not a tier-2 descriptor: %v", d, err)
			continue
		}
		for _, k := range kernels(t, d) {
			if k.Arch == ArchSM90a && !seen[k.Name()] {
				seen[k.Name()] = true
				srcs = append(srcs, k)
			}
		}
	}
	if len(srcs) == 0 {
		t.Fatal("no variant renders an sm_90a kernel at tier 2")
	}
	var wg sync.WaitGroup
	errs := make([]string, len(srcs))
	sem := make(chan struct{}, 2)
	for i, k := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, log, err := n.Compile(k.Source(), k.Name()+".cu", k.Arch, nil); err != nil {
				errs[i] = k.Name() + ": " + err.Error() + "\n" + log
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
	t.Logf("%d sm_90a kernels compiled", len(srcs))
}
