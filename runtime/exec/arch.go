package exec

import (
	"fmt"
	"strings"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// codegenArch is the architecture that programs built for dev target: sm_90a
// on a Hopper GPU when an NVRTC that compiles it loads (flash attention's tier
// 2), else the device's own (sm_80, sm_90, ...).
func codegenArch(dev *cuda.Device) string {
	a := dev.Arch()
	if a == "sm_90" {
		if _, err := cuda.NVRTCFor("sm_90a"); err == nil {
			return "sm_90a"
		}
	}
	return a
}

// kernelArch is the architecture k compiles for on dev: its own (an
// architecture-specific kernel, sm_90a) or the device's, and an error when dev
// cannot run it (a program compiled for an h200 target run on an A100).
func kernelArch(dev *cuda.Device, k codegen.Kernel) (string, error) {
	a := dev.Arch()
	if k.Arch == "" {
		return a, nil
	}
	if strings.TrimRight(k.Arch, "af") != a {
		return "", fmt.Errorf("exec: kernel %s (%s) is built for %s; %s is %s (compile for this GPU's target)",
			k.Name, k.Op, k.Arch, dev.Name(), a)
	}
	return k.Arch, nil
}
