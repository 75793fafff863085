// Package nvrtctest gives tests the NVRTC that compiles sm_90a kernels (Hopper's
// wgmma and TMA: flash tier 2) in a process whose default NVRTC may be older.
//
// CI runs on Debian bookworm, whose NVRTC 11.8 compiles tier 1 (compute_80, sm_90)
// but not sm_90a; .ci/run unpacks Debian trixie's NVRTC 12.4 and names it in
// LCC_NVRTC12, and cuda.NVRTCFor loads it beside 11.8, so one test binary checks
// both tiers with the compiler each is meant for. On a machine whose default NVRTC
// is 12.0 or newer (a GPU machine with the CUDA 13 driver stack) that one is used.
// The package sits at the runtime level (it imports runtime/cuda), which is why it
// is not part of codegen/cuda/cudatest; tests of any level may import it.
package nvrtctest

import (
	"errors"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
)

// NVRTC12 returns an NVRTC, 12.0 or newer, that compiles sm_90a: use its Compile
// or CompileCUBIN with arch "sm_90a". It skips t, saying what to set, when there is
// none (the default NVRTC is older and LCC_NVRTC12 is unset), and fails t when
// LCC_NVRTC12 names a library that does not load or is too old, since a broken CI
// setting must not pass as a skip.
func NVRTC12(t testing.TB) *cuda.NVRTC {
	t.Helper()
	n, err := cuda.NVRTCFor("sm_90a")
	if errors.Is(err, cuda.ErrUnavailable) {
		t.Skipf("skipping sm_90a compile: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
