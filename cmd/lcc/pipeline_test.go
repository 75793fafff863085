package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPassesPipeline prints the pass list for compile flags, and refuses bad ones.
func TestPassesPipeline(t *testing.T) {
	out, stderr, code := lcc(t, "passes", "--pipeline", "--attention=dilated", "--segments=8,16",
		"--dilations=1,2", "--ranks=2", "--precision=bf16", "--loss=cross-entropy")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"match-attention\nmatch-norms\ndilate-attention segments=8,16 dilations=1,2",
		"\ninsert-loss loss=cross-entropy\n", "\nshard-sequence ranks=2 mode=dilated\nautodiff\n",
		"\nall-reduce-gradients ranks=2\n", "\ncodegen arch=sm_90a storage=bf16\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("lcc passes --pipeline lacks %q:\n%s", want, out)
		}
	}
	if _, stderr, code := lcc(t, "passes", "--pipeline", "--loss=mse"); code != 1 || !strings.Contains(stderr, `--loss "mse"`) {
		t.Errorf("--loss=mse: exit %d, %s", code, stderr)
	}
}

// TestPrintAfterAutodiff prints the IR after the autodiff pass: the gradients.
func TestPrintAfterAutodiff(t *testing.T) {
	_, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=16",
		"--print-ir-after=autodiff")
	if code != 0 || !strings.Contains(stderr, "// ----- IR after autodiff -----") ||
		!strings.Contains(stderr, `"grad.tok.weight"`) {
		t.Errorf("exit %d, stderr:\n%.600s", code, stderr)
	}
}

// TestPrintAfterFuse: lcc compile --fuse=on prints the fused IR after fuse and
// reports the groups; without --fuse the pipeline has no fuse row.
func TestPrintAfterFuse(t *testing.T) {
	stdout, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "llama_mini.onnx"), "--seq-len=16",
		"--fuse=on", "--print-ir-after=fuse")
	if code != 0 || !strings.Contains(stderr, "// ----- IR after fuse -----") ||
		!strings.Contains(stderr, "= fused_elementwise(") {
		t.Errorf("exit %d, stderr:\n%.600s", code, stderr)
	}
	if !strings.Contains(stdout, "elementwise groups of") {
		t.Errorf("the report lists no fused groups:\n%s", stdout)
	}
	out, _, code := lcc(t, "passes", "--pipeline", "--fuse=on")
	if code != 0 || !strings.Contains(out, "\nfuse max-ops=32\ncodegen") {
		t.Errorf("lcc passes --pipeline --fuse=on: exit %d\n%s", code, out)
	}
	if _, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "llama_mini.onnx"), "--fuse=maybe"); code == 0 ||
		!strings.Contains(stderr, `--fuse "maybe": want on or off`) {
		t.Errorf("--fuse=maybe: exit %d, %s", code, stderr)
	}
}
