package nvrtctest

import (
	"bytes"
	"testing"
)

// TestNVRTC12 compiles a kernel that only sm_90a accepts (setmaxnreg is
// architecture-specific) with the helper's NVRTC.
func TestNVRTC12(t *testing.T) {
	n := NVRTC12(t)
	v, err := n.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %s from %s", v, n.Path())
	const src = `extern "C" __global__ void k(float* y) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  y[threadIdx.x] = 1.0f;
}`
	ptx, log, err := n.Compile(src, "k.cu", "sm_90a", nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if !bytes.Contains(ptx, []byte(".target sm_90a")) {
		t.Errorf("PTX is not for sm_90a:\n%s", ptx)
	}
}
