package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCompileHostBudget: lcc compile for a GPU target plans its host side
// (the model, pinned buffers and the CUDA runtime's 640 MiB) under
// --host-memory-budget and refuses, up front and with status 1, a plan
// that cannot fit: both figures (the host peak and the budget; the GPU's budget
// and smallest peak), the parts, and a setting that fits, which is checked to
// fit. A budget that binds nothing leaves the program hash as it is.
func TestCompileHostBudget(t *testing.T) {
	model := filepath.Join(td, "onnx", "llama_mini.onnx")
	base := []string{"compile", model, "--target=h200x1", "--precision=bf16", "--attention=dilated"}
	run := func(extra ...string) (string, string, int) { return lcc(t, append(base, extra...)...) }

	// Offload forced past the host budget: the pinned block does not fit.
	_, stderr, code := run("--seq-len=8192", "--checkpoint=layers+offload", "--host-memory-budget=643MiB")
	for _, want := range []string{"does not fit the host", "643.97 MiB on the host at its peak",
		"pinned offloaded activations 2.00 MiB", "per GPU", "643.00 MiB of --host-memory-budget",
		"the CUDA runtime 640.00 MiB", "--host-memory-budget=644MiB", "--checkpoint=auto"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("forced offload: exit %d, want %q in:\n%s", code, want, stderr)
		}
	}
	if _, stderr, code := run("--seq-len=8192", "--checkpoint=layers+offload", "--host-memory-budget=644MiB"); code != 0 {
		t.Errorf("with the host budget it names: exit %d\n%s", code, stderr)
	}

	// No plan fits the GPU's budget: refused with the GPU's figures, the host's,
	// and a sequence length that fits.
	_, stderr, code = run("--seq-len=65536", "--memory-budget=150MiB", "--host-memory-budget=704MiB")
	for _, want := range []string{"budget 157286400 bytes per GPU", "smallest planned peak",
		"of the 704.00 MiB of --host-memory-budget", "it would fit with about --seq-len="} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("GPU budget: exit %d, want %q in:\n%s", code, want, stderr)
		}
	}
	if m := regexp.MustCompile(`--seq-len=(\d+)`).FindStringSubmatch(stderr); m != nil {
		if _, stderr, code := run("--seq-len="+m[1], "--memory-budget=150MiB", "--host-memory-budget=704MiB"); code != 0 {
			t.Errorf("at the suggested --seq-len=%s: exit %d\n%s", m[1], code, stderr)
		}
	}

	// The report prints the host peak beside the GPU's; a loose budget changes
	// no program.
	hash := func(extra ...string) string {
		out, stderr, code := run(append([]string{"--seq-len=8192"}, extra...)...)
		if code != 0 || !strings.Contains(out, "host peak") {
			t.Fatalf("exit %d, no host peak:\n%s%s", code, out, stderr)
		}
		return regexp.MustCompile(`program +(\S+)`).FindString(out)
	}
	if a, b := hash(), hash("--host-memory-budget=1TiB"); a != b || a == "" {
		t.Errorf("program without a host budget %q, with a loose one %q", a, b)
	}
}
