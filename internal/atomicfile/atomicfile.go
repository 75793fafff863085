// Package atomicfile replaces files so that, even across a crash, a reader finds
// the old content or the new, never a mix, and the new content survives a power
// loss once Write returns. Every writer of lcc's outputs (compiled programs,
// kernels, checkpoints, safetensors, the NVRTC cache) goes through it, so all of
// them give the same guarantee.
//
// The sequence is the one POSIX needs: write a temporary file in the target's
// directory, fsync it, rename it over the target, fsync the directory (the rename
// is durable only once the directory entry is). A failure at any step removes the
// temporary file and leaves the target as it was.
package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// A temporary file is named "." + the target's name + TempInfix + random digits,
// so a writer that was killed can find and remove its leftovers (RemoveTemps).
const TempInfix = ".tmp-"

// WriteFile replaces path with data, readable with mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what fill writes, readable with mode perm. fill may
// fail; the target is then untouched.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+TempInfix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = fill(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Filesystems that cannot fsync a
// directory (EINVAL, ENOTSUP) give no stronger guarantee to anyone; that is not an
// error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) &&
		!errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

// RemoveTemps deletes the temporary files a killed writer left in dir.
func RemoveTemps(dir string) error {
	matches, err := filepath.Glob(filepath.Join(dir, ".*"+TempInfix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
