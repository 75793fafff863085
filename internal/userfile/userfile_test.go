package userfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestOpenWriter: a named pipe no one reads is refused at once; one with a
// reader, and a regular file, are written as usual.
func TestOpenWriter(t *testing.T) {
	dir := t.TempDir()
	pipe := fifotest.Make(t, dir, "metrics.jsonl")
	var err error
	fifotest.Within(t, 5*time.Second, []string{pipe}, func() {
		_, err = OpenWriter(pipe, os.O_CREATE|os.O_TRUNC, 0o644)
	})
	if err == nil || err.Error() != "open "+pipe+": a named pipe with no reader" {
		t.Errorf("a pipe with no reader: %v", err)
	}
	r, err := os.OpenFile(pipe, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := OpenWriter(pipe, os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("a pipe with a reader: %v", err)
	}
	w.Write([]byte("line\n"))
	w.Close()
	buf := make([]byte, 16)
	if n, _ := r.Read(buf); string(buf[:n]) != "line\n" {
		t.Errorf("read %q through the pipe", buf[:n])
	}
	reg := filepath.Join(dir, "m.jsonl")
	w, err = OpenWriter(reg, os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("x"))
	w.Close()
	if b, _ := os.ReadFile(reg); string(b) != "x" {
		t.Errorf("regular file holds %q", b)
	}
}
