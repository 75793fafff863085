// Package devicetest opens the GPU a test runs on. It is not part of
// internal/gputest, which decides what a test does without its GPU, because
// runtime/cuda's own tests import gputest, so gputest cannot import runtime/cuda
// back; like nvrtctest it sits at the runtime level, and tests of any level may
// import it.
package devicetest

import (
	"testing"

	"github.com/lcc-dev/lcc/internal/gputest"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// Open opens GPU 0 for the rest of t, closed when t ends, or skips t (fails it
// under LCC_REQUIRE_GPU) where the GPU or its driver is missing.
func Open(t testing.TB) *cuda.Device {
	t.Helper()
	dev, err := cuda.Open(0)
	if err != nil {
		gputest.Skipf(t, "skipping: no usable GPU: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}
