package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	if err := WriteFile(path, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	assertNoTemps(t, dir)
}

// A failing writer leaves the old file and no temporary file.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.bin")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	fault := errors.New("disk on fire")
	err := Write(path, 0o644, func(w io.Writer) error {
		w.Write([]byte("half of the new"))
		return fault
	})
	if !errors.Is(err, fault) {
		t.Fatalf("err = %v, want the writer's", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("after a failed write: %q", got)
	}
	assertNoTemps(t, dir)
	// A missing directory is an error, not a panic.
	if err := WriteFile(filepath.Join(dir, "no", "x"), nil, 0o644); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".a.json.tmp-123", ".b.tmp-9", "keep.json", ".hidden"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
	}
	if err := RemoveTemps(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) != 2 || left[0] != ".hidden" || left[1] != "keep.json" {
		t.Errorf("left %v", left)
	}
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, ".*"+TempInfix+"*")); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
}
