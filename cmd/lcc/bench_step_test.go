package main

import (
	"github.com/lcc-dev/lcc/internal/gputest"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
)

// TestTrainProfileBenchStep: --profile on the CPU is refused naming the flag;
// on a GPU, lcc train --profile prints the profile, the planned and measured
// peaks and the host traffic, and lcc bench step times gpt_mini's step
// (without a GPU, bench step fails with a clear error).
func TestTrainProfileBenchStep(t *testing.T) {
	gpt := td + "/onnx/gpt_mini.onnx"
	_, stderr, code := lcc(t, "train", gpt, "--data=synthetic:copy", "--seq-len=16", "--steps=1", "--profile")
	if code != 1 || !strings.Contains(stderr, "--profile times GPU kernels") {
		t.Errorf("--profile on the CPU: exit %d, %q", code, stderr)
	}
	dev, gpuErr := cuda.Open(0)
	if gpuErr == nil {
		dev.Close()
	}
	out, stderr, code := lcc(t, "bench", "step", gpt, "--seq-len=16", "--batch=2", "--iters=2", "--warmup=1")
	if gpuErr != nil {
		if code != 1 || !strings.Contains(stderr, "no NVIDIA driver") {
			t.Errorf("bench step without a GPU: exit %d, %q", code, stderr)
		}
		gputest.Skipf(t, "skipping the GPU runs: %v", gpuErr)
	}
	for _, want := range []string{"lcc   step", "tokens/s", "measured peak", "profile steps 2..3", "optim.adamw"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("bench step: exit %d, no %q in\n%s%s", code, want, out, stderr)
		}
	}
	out, stderr, code = lcc(t, "train", gpt, "--device=cuda", "--data=synthetic:copy", "--seq-len=16",
		"--batch=2", "--steps=3", "--profile")
	for _, want := range []string{"state   resident on the GPU", "profile steps 2..3", "measured peak",
		"host    at most "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("train --profile: exit %d, no %q in\n%s%s", code, want, out, stderr)
		}
	}
}
