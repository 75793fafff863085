package folder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

var owned = []string{"graph.lcc", "report.json", "kernels/", "graph.onnx"}

// files writes name → content into dir.
func files(m map[string]string) func(dir string) error {
	return func(dir string) error {
		for name, data := range m {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// tree lists dir's files, slash-separated, sorted.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// TestWriteReplacesWhole (issue #23): a folder written twice holds exactly the
// second write's files (a reused folder kept 130 kernels of a 44-kernel
// program), nothing is left beside it but the lock, and it verifies.
func TestWriteReplacesWhole(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	first := map[string]string{"graph.lcc": "a", "kernels/k0.cu": "k0", "kernels/k1.cu": "k1", "graph.onnx": "x"}
	if err := Write(dir, "sha256:1", files(first)); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "sha256:2", files(map[string]string{"graph.lcc": "b", "kernels/k0.cu": "k0'"})); err != nil {
		t.Fatal(err)
	}
	if got, want := tree(t, dir), []string{"graph.lcc", "kernels/k0.cu", "manifest.json"}; !slices.Equal(got, want) {
		t.Errorf("folder holds %v, want %v", got, want)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 2 {
		t.Errorf("beside the folder: %v, want only out and out.lock", ents)
	}
	if err := Verify(dir, owned); err != nil {
		t.Error(err)
	}
	m, err := Read(dir)
	if err != nil || m.Program != "sha256:2" || len(m.Files) != 2 || m.Files[1].Path != "kernels/k0.cu" ||
		m.Files[1].Size != 3 {
		t.Errorf("manifest %+v, %v", m, err)
	}
}

// TestWriteRefusesForeignFolder: a non-empty folder without a manifest is not
// lcc's and is left alone; an empty one is used.
func TestWriteRefusesForeignFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "thesis")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "chapter1.tex"), []byte("years of work"), 0o644)
	err := Write(dir, "sha256:1", files(map[string]string{"graph.lcc": "a"}))
	if err == nil || !strings.Contains(err.Error(), "has no manifest.json") || !strings.Contains(err.Error(), dir) {
		t.Errorf("err = %v", err)
	}
	if got := tree(t, dir); !slices.Equal(got, []string{"chapter1.tex"}) {
		t.Errorf("the folder now holds %v", got)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.MkdirAll(empty, 0o755)
	if err := Write(empty, "sha256:1", files(map[string]string{"graph.lcc": "a"})); err != nil {
		t.Error(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if err := Write(file, "sha256:1", files(nil)); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("a file as -o: %v", err)
	}
}

// TestWriteFailureKeepsOld: a write that fails leaves the old folder as it was
// and no temporary folder.
func TestWriteFailureKeepsOld(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	if err := Write(dir, "sha256:1", files(map[string]string{"graph.lcc": "a"})); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(dir, "sha256:2", func(tmp string) error {
		files(map[string]string{"graph.lcc": "b"})(tmp)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "graph.lcc")); string(data) != "a" || Verify(dir, owned) != nil {
		t.Errorf("the old folder changed: graph.lcc = %q, %v", data, Verify(dir, owned))
	}
	if left, _ := filepath.Glob(filepath.Join(parent, "out.tmp-*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestConcurrentWrites (issue #23): compiles into one folder take turns, so
// the folder ends as one of them wrote it, never a mix.
func TestConcurrentWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			m := map[string]string{"graph.lcc": fmt.Sprint("model ", i), "report.json": fmt.Sprint(i)}
			for k := range i + 1 {
				m[fmt.Sprintf("kernels/k%d.cu", k)] = fmt.Sprint(i)
			}
			errs[i] = Write(dir, fmt.Sprint("sha256:", i), files(m))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if err := Verify(dir, owned); err != nil {
		t.Fatal(err)
	}
	m, _ := Read(dir)
	var i int
	fmt.Sscanf(m.Program, "sha256:%d", &i)
	graph, _ := os.ReadFile(filepath.Join(dir, "graph.lcc"))
	if string(graph) != fmt.Sprint("model ", i) || len(m.Files) != i+3 {
		t.Errorf("manifest of write %d, graph.lcc %q, %d files", i, graph, len(m.Files))
	}
}

// TestVerify: an edited, missing or foreign file is named; files outside the
// places only the compile writes are the user's and not checked.
func TestVerify(t *testing.T) {
	write := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "out")
		err := Write(dir, "sha256:1", files(map[string]string{"graph.lcc": "graph", "report.json": "{}",
			"kernels/k12.cu": "__global__ void k12() {}"}))
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name string
		edit func(dir string)
		want string // "" for a folder that verifies
	}{
		{"same size", func(dir string) {
			os.WriteFile(filepath.Join(dir, "kernels/k12.cu"), []byte("__global__ void k13() {}"), 0o644)
		}, "kernels/k12.cu: edited since compile (sha256 mismatch with manifest.json)"},
		{"longer", func(dir string) { os.WriteFile(filepath.Join(dir, "graph.lcc"), []byte("graph2"), 0o644) },
			"graph.lcc: edited since compile (6 bytes, manifest.json records 5)"},
		{"missing", func(dir string) { os.Remove(filepath.Join(dir, "report.json")) },
			"report.json: missing"},
		{"stale kernel", func(dir string) { os.WriteFile(filepath.Join(dir, "kernels/k99.cu"), nil, 0o644) },
			"kernels/k99.cu: not written by the compile"},
		{"old graph.onnx", func(dir string) { os.WriteFile(filepath.Join(dir, "graph.onnx"), nil, 0o644) },
			"graph.onnx: not written by the compile"},
		{"user's file", func(dir string) { os.WriteFile(filepath.Join(dir, "loss.png"), nil, 0o644) }, ""},
		{"symlink", func(dir string) {
			os.Remove(filepath.Join(dir, "graph.lcc"))
			os.Symlink("report.json", filepath.Join(dir, "graph.lcc"))
		}, "graph.lcc: not a regular file"},
		{"escaping path", func(dir string) {
			os.WriteFile(filepath.Join(dir, ManifestName),
				[]byte(`{"program":"sha256:1","files":[{"path":"../x","size":0,"sha256":""}]}`), 0o644)
		}, `file path "../x" is not a plain path`},
		{"no manifest", func(dir string) { os.Remove(filepath.Join(dir, ManifestName)) }, "no manifest.json"},
	} {
		dir := write(t)
		tc.edit(dir)
		err := Verify(dir, owned)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestVerifyRefusesPipes: a named pipe as the manifest or as a listed file is
// refused at once, not waited on.
func TestVerifyRefusesPipes(t *testing.T) {
	for _, name := range []string{ManifestName, "graph.lcc"} {
		dir := filepath.Join(t.TempDir(), "out")
		if err := Write(dir, "sha256:1", files(map[string]string{"graph.lcc": "graph"})); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, name))
		pipe := fifotest.Make(t, dir, name)
		var err error
		fifotest.Within(t, 10*time.Second, []string{pipe}, func() { err = Verify(dir, owned) })
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s a named pipe: %v", name, err)
		}
	}
}
