package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/safetensors"
)

// TestCheckHFLongRing is issue 13's acceptance check: the Hugging Face Llama GQA
// exports (eager and SDPA, each building its causal mask inside the graph) pass
// `lcc check --ranks=4 --attention=ring --grads` on the CPU at 4,104 tokens, past
// the 4,096 up to which the mask used to be recognised by evaluating it. The
// references (outputs, loss, every gradient) were made by PyTorch with
// scripts/export_hf.py. About 6-8 s each.
func TestCheckHFLongRing(t *testing.T) {
	if testing.Short() {
		t.Skip("4,104-token sharded checks: skipped with -short")
	}
	for _, m := range []string{"eager", "sdpa"} {
		t.Run(m, func(t *testing.T) {
			t.Parallel()
			base := filepath.Join(td, "hf", "hf_llama_gqa_"+m+"_long")
			out, stderr, code := lcc(t, "check", base+".onnx", "--ref", base+".ref.safetensors",
				"--ranks=4", "--attention=ring", "--grads")
			// The output, the loss and every gradient of the reference.
			ref, err := safetensors.Read(base + ".ref.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			want := 2
			for _, name := range ref.Names {
				if strings.HasPrefix(name, "grad.") {
					want++
				}
			}
			if code != 0 || !strings.Contains(out, fmt.Sprintf("compared=%d ", want)) ||
				!strings.Contains(out, "[1,4104,64]") {
				t.Fatalf("exit %d, want %d compared\n%s\n%s", code, want, out, stderr)
			}
		})
	}
}
