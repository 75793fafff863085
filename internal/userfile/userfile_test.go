package userfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
)

// TestRefusesWhatIsNotRegular: a named pipe (no writer), a directory and a
// character device are refused at once, naming the path and what it is; a
// regular file reads whole, and reads as blocking again.
func TestRefusesWhatIsNotRegular(t *testing.T) {
	dir := t.TempDir()
	pipe := fifotest.Make(t, dir, "model.onnx")
	cases := map[string]string{pipe: "a named pipe", dir: "a directory"}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases["/dev/zero"] = "a character device"
	}
	for path, what := range cases {
		var err1, err2 error
		fifotest.Within(t, 5*time.Second, []string{pipe}, func() {
			_, err1 = Open(path)
			_, err2 = ReadFile(path)
		})
		for _, err := range []error{err1, err2} {
			want := "open " + path + ": not a regular file (" + what + ")"
			if err == nil || err.Error() != want || !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: got %v, want %q wrapping ErrNotRegular", path, err, want)
			}
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	fifotest.Within(t, 5*time.Second, []string{pipe}, func() { _, err = OpenIn(root, "model.onnx") })
	if !errors.Is(err, ErrNotRegular) || !strings.HasPrefix(err.Error(), "open model.onnx: ") {
		t.Errorf("OpenIn of a pipe: %v", err)
	}

	reg := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(reg, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(reg); err != nil || string(b) != "weights" {
		t.Errorf("ReadFile of a regular file: %q, %v", b, err)
	}
	f, err := OpenIn(root, "w.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if blocking, err := isBlocking(f); err != nil || !blocking {
		t.Errorf("the opened file is not back in blocking mode (%v)", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
