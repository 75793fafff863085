package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lcc-dev/lcc/driver"
)

// folderFiles reads every file of dir by slash-separated relative path.
func folderFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFolder(t *testing.T, got, want string) {
	t.Helper()
	a, b := folderFiles(t, got), folderFiles(t, want)
	for name, data := range a {
		if w, ok := b[name]; !ok {
			t.Errorf("%s: left over from the first compile", name)
		} else if !bytes.Equal(data, w) {
			t.Errorf("%s differs from a compile into an empty folder", name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			t.Errorf("%s: missing", name)
		}
	}
}

// TestCompileReplacesFolder (issue #23): compiling a second model into the -o
// folder of a first leaves exactly the files a compile of the second into an
// empty folder writes: no stale kernels, no old graph.onnx.
func TestCompileReplacesFolder(t *testing.T) {
	dir, fresh := filepath.Join(t.TempDir(), "out"), filepath.Join(t.TempDir(), "fresh")
	llama, gpt := filepath.Join(td, "onnx", "llama_mini.onnx"), filepath.Join(td, "onnx", "gpt_mini.onnx")
	for _, args := range [][]string{
		{"compile", llama, "--seq-len=16", "-o", dir, "--emit=onnx,dot"},
		{"compile", gpt, "--seq-len=16", "-o", dir},
		{"compile", gpt, "--seq-len=16", "-o", fresh},
	} {
		if _, stderr, code := lcc(t, args...); code != 0 {
			t.Fatalf("lcc %v: exit %d: %s", args, code, stderr)
		}
	}
	sameFolder(t, dir, fresh)
	if err := driver.VerifyFolder(dir); err != nil {
		t.Error(err)
	}
	if left, _ := filepath.Glob(dir + ".*-*"); len(left) > 0 {
		t.Errorf("left beside the folder: %v", left)
	}
}

// TestConcurrentCompiles (issue #23): two compiles into one folder take turns;
// the folder ends as one of them writes it, and verifies.
func TestConcurrentCompiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "out")
	models := []string{filepath.Join(td, "onnx", "llama_mini.onnx"), filepath.Join(td, "onnx", "gpt_mini.onnx")}
	var wg sync.WaitGroup
	for _, m := range models {
		wg.Go(func() {
			if _, stderr, code := lcc(t, "compile", m, "--seq-len=16", "-o", dir); code != 0 {
				t.Errorf("compile %s: exit %d: %s", m, code, stderr)
			}
		})
	}
	wg.Wait()
	if err := driver.VerifyFolder(dir); err != nil {
		t.Fatal(err)
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	model := models[0]
	if strings.Contains(string(rep), `"model": "gpt_mini.onnx"`) {
		model = models[1]
	}
	fresh := filepath.Join(root, "fresh")
	if _, stderr, code := lcc(t, "compile", model, "--seq-len=16", "-o", fresh); code != 0 {
		t.Fatalf("compile: exit %d: %s", code, stderr)
	}
	sameFolder(t, dir, fresh)
}

// TestCompiledFolderEdited (issue #23): lcc train DIR/graph.lcc refuses a
// folder whose kernel or launch plan was edited, or that holds a stale kernel,
// naming the file.
func TestCompiledFolderEdited(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if _, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=16",
		"-o", dir); code != 0 {
		t.Fatalf("compile: exit %d: %s", code, stderr)
	}
	kernels, _ := filepath.Glob(filepath.Join(dir, "kernels", "*.cu"))
	if len(kernels) == 0 {
		t.Fatal("the compile wrote no kernels")
	}
	train := func() (string, int) {
		_, stderr, code := lcc(t, "train", filepath.Join(dir, "graph.lcc"), "--data=synthetic:copy",
			"--steps=1", "--seq-len=16", "--device=cpu")
		return stderr, code
	}
	if stderr, code := train(); code != 0 {
		t.Fatalf("train the compiled folder: exit %d: %s", code, stderr)
	}
	edit := func(path string, change func([]byte) []byte, want string) {
		t.Helper()
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(path, change(old), 0o644)
		defer os.WriteFile(path, old, 0o644)
		if stderr, code := train(); code != 1 || !strings.Contains(stderr, path+": "+want) {
			t.Errorf("train after editing %s: exit %d: %s, want %q", path, code, stderr, want)
		}
	}
	flip := func(b []byte) []byte { // same size, other bytes
		b = slices.Clone(b)
		b[len(b)/2] ^= 1
		return b
	}
	edit(kernels[0], flip, "edited since compile (sha256 mismatch with manifest.json)")
	edit(filepath.Join(dir, "launch_plan.json"), func(b []byte) []byte { return append(b, ' ') },
		"edited since compile")
	stale := filepath.Join(dir, "kernels", "stale.cu")
	os.WriteFile(stale, []byte("// from another compile\n"), 0o644)
	if stderr, code := train(); code != 1 || !strings.Contains(stderr, stale+": not written by the compile") {
		t.Errorf("train with a stale kernel: exit %d: %s", code, stderr)
	}
}

// TestCompileRefusesForeignFolder: -o naming a folder lcc did not write, with
// files in it, fails and leaves it alone.
func TestCompileRefusesForeignFolder(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("mine"), 0o644)
	_, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=16", "-o", dir)
	if code != 1 || !strings.Contains(stderr, "has no manifest.json") || !strings.Contains(stderr, dir) {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if got := folderFiles(t, dir); len(got) != 1 || string(got["notes.txt"]) != "mine" {
		t.Errorf("the folder now holds %v", got)
	}
}
