package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/safetensors"
)

// TestExportCLI: lcc train --plot draws the loss; lcc export writes a trained checkpoint's weights under
// PyTorch's names, and refuses a bad format or a folder without checkpoints.
func TestExportCLI(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	png := filepath.Join(dir, "loss.png")
	if _, stderr, code := lcc(t, "train", filepath.Join(td, "onnx", "llama_mini.onnx"), "--data=synthetic:copy",
		"--seq-len=16", "--steps=2", "--checkpoint-dir="+ck, "--plot="+png); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("--plot wrote no PNG: %v", err)
	}
	out := filepath.Join(dir, "w.safetensors")
	stdout, stderr, code := lcc(t, "export", ck, "--format=safetensors", "-o", out)
	if code != 0 || !strings.Contains(stdout, "wrote "+out+": 21 tensors") {
		t.Fatalf("export: exit %d: %s%s", code, stdout, stderr)
	}
	st, err := safetensors.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Tensors["blocks.1.wq.weight"]; !ok || len(st.Names) != 21 {
		t.Errorf("exported %v", st.Names)
	}
	if _, stderr, code := lcc(t, "export", ck, "--format=gguf", "-o", out); code != 1 || !strings.Contains(stderr, "--format") {
		t.Errorf("--format=gguf: exit %d: %s", code, stderr)
	}
	if _, stderr, code := lcc(t, "export", dir, "-o", out); code != 1 || !strings.Contains(stderr, "no checkpoint") {
		t.Errorf("no checkpoint: exit %d: %s", code, stderr)
	}
}
