// Package userfile opens the files lcc reads because a user, or a file a user
// gave, named them: models, external data, references and inputs, token data,
// checkpoints, target files, metrics. Such a path may name anything, and opening
// a named pipe for reading blocks until a writer comes, which may be never; a
// device may never end (/dev/zero). So every such file is opened through Open:
//
//   - the open itself cannot block: O_NONBLOCK makes opening a named pipe
//     return at once, writer or not;
//   - the open file is then fstat'ed (not the path, which may change between a
//     stat and an open) and anything but a regular file is refused, naming the
//     path and what it is ("open model.onnx: not a regular file (a named
//     pipe)", an *fs.PathError as os.Open's errors are);
//   - O_NONBLOCK is cleared again, so the regular file reads as usual.
//
// Regular files ignore O_NONBLOCK for reads on every system lcc runs on;
// clearing it keeps that true for anything that reads the descriptor later.
// Logs lcc writes (--metrics) open through OpenWriter, which refuses a named
// pipe no one reads instead of waiting for a reader.
package userfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the error of opening anything but a regular file.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading if it is a regular file.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	return regular(f, path)
}

// OpenIn is Open of name inside root, with root's confinement (os.Root).
func OpenIn(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	return regular(f, name)
}

// OpenWriter opens path for writing with os.OpenFile's flag (O_WRONLY is
// added) and perm, without blocking: a named pipe with no reader is an error
// saying so, not a wait. Unlike Open it takes any kind of file, since a pipe
// with a reader or a device (/dev/stdout) is a fine place for a log to go.
func OpenWriter(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|os.O_WRONLY|nonblock, perm)
	if errors.Is(err, errNoReader) {
		return nil, &fs.PathError{Op: "open", Path: path, Err: errors.New("a named pipe with no reader")}
	}
	if err != nil {
		return nil, err
	}
	if err := clearNonblock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// ReadFile is os.ReadFile through Open.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// The size is a hint: the file may grow or shrink while it is read.
	var buf bytes.Buffer
	buf.Grow(int(min(st.Size(), 1<<30)) + 1)
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return buf.Bytes(), nil
}

// regular returns f, opened as name, if it is a regular file, with
// O_NONBLOCK cleared; otherwise it closes f and says what it is.
func regular(f *os.File, name string) (*os.File, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		// The form of os.Open's errors, which callers already wrap and name.
		return nil, &fs.PathError{Op: "open", Path: name,
			Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(st.Mode()))}
	}
	if err := clearNonblock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// kind names what a file of mode m is, for errors.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.Type().String()
}
