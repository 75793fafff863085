package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/train"
	"github.com/lcc-dev/lcc/train/plot"
)

// Output paths are checked before any work, so that a run does not end, hours
// later, unable to write what it made. Nothing is created: a check only shows
// that writing will be possible.

// checkOutputDir checks that the folder flag names can hold files: it is a
// folder, or it can be created.
func checkOutputDir(flag, path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("%s %s: is a file, not a folder", flag, path)
	case err == nil:
		return writable(flag, path, path)
	case !missing(err):
		// A parent that cannot be searched, say: Stat's error is then the answer.
		return fmt.Errorf("%s %s: %w", flag, path, fserr.Cause(err))
	}
	return creatable(flag, path)
}

// checkOutputFile checks that the file flag names can be written: it is not a
// folder, and its folder exists as one or can be created.
func checkOutputFile(flag, path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s %s: is a folder; want a file name", flag, path)
	case err == nil:
		// An existing file (or /dev/null) is opened for writing, neither truncated
		// nor waited on: a named pipe no one reads fails at once.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
		if errors.Is(err, syscall.ENXIO) {
			return fmt.Errorf("%s %s: is a named pipe that no one reads", flag, path)
		}
		if err != nil {
			return fmt.Errorf("%s %s: cannot be written: %w", flag, path, fserr.Cause(err))
		}
		return f.Close()
	}
	// The file does not exist yet: what matters is that its folder can take it. The
	// longer flag text keeps the file asked for in the folder's error.
	return checkOutputDir(flag+" "+path+": its folder", filepath.Dir(path))
}

// creatable checks that the nearest existing folder above path is a folder
// that can be written, so that path can be made in it.
func creatable(flag, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	// MkdirAll will make every missing level, so only the first existing one is tested.
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		switch {
		case err == nil && !st.IsDir():
			return fmt.Errorf("%s %s: cannot be created: %s is a file", flag, path, dir)
		case err == nil:
			return writable(flag, path, dir)
		case !missing(err):
			return fmt.Errorf("%s %s: %w", flag, path, fserr.Cause(err))
		}
		// Reached the root without an existing folder: stop rather than loop on "/".
		if dir == filepath.Dir(dir) {
			return fmt.Errorf("%s %s: no folder above it exists", flag, path)
		}
	}
}

// missing says that a path does not exist: ENOTDIR too (a file stands where a
// folder above it should), which creatable then names.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// writable checks that a file can be created in dir by creating and removing
// one: permission bits alone do not tell (read-only mounts, ACLs, root).
func writable(flag, path, dir string) error {
	f, err := os.CreateTemp(dir, ".lcc-write-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write in %s: %w", flag, path, dir, fserr.Cause(err))
	}
	// Removed at once: the check must leave nothing behind in the user's folder.
	f.Close()
	return os.Remove(f.Name())
}

// checkTrainOutputs checks the paths lcc train writes: checkpoints, metrics and
// the loss plot.
func checkTrainOutputs(cfg train.Config, plotPath string) error {
	if cfg.CheckpointDir != "" {
		if err := checkOutputDir("--checkpoint-dir", cfg.CheckpointDir); err != nil {
			return err
		}
	}
	if cfg.Metrics != "" {
		if err := checkOutputFile("--metrics", cfg.Metrics); err != nil {
			return err
		}
	}
	if plotPath == "" {
		return nil
	}
	// An unknown image extension is caught now rather than after the last step.
	if err := plot.CheckFormat(plotPath); err != nil {
		return fmt.Errorf("--plot %w", err)
	}
	return checkOutputFile("--plot", plotPath)
}
