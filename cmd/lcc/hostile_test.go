package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/internal/hostile"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// TestHostileModelsCLI runs lcc compile and lcc check on every model of package
// hostile. A model lcc refuses exits 1 from both, naming the node; one that only a
// host run refuses compiles (a plan may be large) and check refuses it before it
// allocates, with the peak, the budget and the node; no output is longer than a few
// kilobytes, and none holds "panic" or "BUG" (lcc() fails on a Go crash itself); a
// valid one (OK) compiles and checks without a crash.
func TestHostileModelsCLI(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.safetensors")
	ts := map[string]*tensor.Tensor{"x": tensor.New(tensor.F32, 2, 3), "y": tensor.New(tensor.F32, 1)}
	if err := safetensors.Write(ref, []string{"x", "y"}, ts, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range hostile.Cases() {
		model := filepath.Join(dir, c.Name+".onnx")
		if err := os.WriteFile(model, c.Spec.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			hostileCLI(t, c, model, ref)
		})
	}
}

// hostileCLI runs lcc compile and lcc check on case c written to model.
func hostileCLI(t *testing.T, c hostile.Case, model, ref string) {
	dir := filepath.Dir(model)
	node := `"` + c.Node // a long name is cut, its closing quote with it
	_, stderr, code := lcc(t, "compile", model, "-o", filepath.Join(dir, c.Name))
	switch {
	case (c.Run || c.OK) && code != 0:
		t.Errorf("compile: exit %d: %.300s", code, stderr)
	case !c.Run && !c.OK && (code != 1 || !strings.Contains(stderr, node) || !strings.Contains(stderr, c.Want)):
		t.Errorf("compile: exit %d, want 1 naming %s and %q: %.300s", code, node, c.Want, stderr)
	}
	_, stderr, code = lcc(t, "check", model, "--ref", ref, "--host-memory-budget=256MiB")
	if c.OK {
		if code > 1 { // the reference's y is only a placeholder: 1 is a mismatch
			t.Errorf("check: exit %d: %.300s", code, stderr)
		}
		return
	}
	if code != 1 || !strings.Contains(stderr, node) || !strings.Contains(stderr, c.Want) {
		t.Errorf("check: exit %d, want 1 naming %s and %q: %.300s", code, node, c.Want, stderr)
	}
	if c.Run && !strings.Contains(stderr, "(--host-memory-budget)") {
		t.Errorf("check does not say where its limit comes from: %.300s", stderr)
	}
	if len(stderr) > 4096 || strings.Contains(stderr, "BUG") || strings.Contains(stderr, "panic") {
		t.Errorf("check: %d bytes on stderr reading as a crash: %.300s", len(stderr), stderr)
	}
}

// TestHostBudget: lcc run and lcc train --device=cpu refuse a run whose host
// peak passes --host-memory-budget before starting it, naming the budget and a
// node, and a budget that fits lets the same run go.
func TestHostBudget(t *testing.T) {
	model := filepath.Join(td, "onnx", "llama_mini.onnx")
	ref := filepath.Join(td, "ref", "llama_mini.ref.safetensors")
	_, stderr, code := lcc(t, "run", model, "--inputs", ref, "--host-memory-budget=64KiB")
	if code != 1 || !strings.Contains(stderr, "more than the 65536 bytes") || !strings.Contains(stderr, `"node_`) {
		t.Errorf("run under 64KiB: exit %d: %s", code, stderr)
	}
	if _, stderr, code := lcc(t, "run", model, "--inputs", ref, "--host-memory-budget=1GiB"); code != 0 {
		t.Errorf("run under 1GiB: exit %d: %s", code, stderr)
	}
	// At 64K tokens the step's interpreter peak is gigabytes (its plan for a GPU fits).
	_, stderr, code = lcc(t, "train", model, "--device=cpu", "--seq-len=65536", "--steps=1",
		"--data=synthetic:copy", "--host-memory-budget=1GiB")
	if code != 1 || !strings.Contains(stderr, "host memory at its peak") || !strings.Contains(stderr, "--host-memory-budget") {
		t.Errorf("train at 64K tokens under 1GiB: exit %d: %s", code, stderr)
	}
	if _, stderr, code := lcc(t, "run", model, "--inputs", ref, "--host-memory-budget=lots"); code != 1 ||
		!strings.Contains(stderr, "--host-memory-budget") {
		t.Errorf("a bad budget: exit %d: %s", code, stderr)
	}
}
