package fserr

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestCause(t *testing.T) {
	_, err := os.Stat(filepath.Join(t.TempDir(), "missing"))
	c := Cause(err)
	if c.Error() != "no such file or directory" || !errors.Is(c, fs.ErrNotExist) {
		t.Errorf("Cause(%v) = %v", err, c)
	}
	plain := errors.New("x")
	if Cause(plain) != plain {
		t.Error("a plain error changed")
	}
}
