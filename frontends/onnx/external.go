package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/tensor"
)

// extFiles opens external data files under the model's folder and keeps them
// open for the rest of the Decode call (many tensors share one file).
type extFiles struct {
	dir     string
	realDir string // dir with its own symlinks resolved
	root    *os.Root
	files   map[string]*os.File
}

func (e *extFiles) close() {
	for _, f := range e.files {
		f.Close()
	}
	if e.root != nil {
		e.root.Close()
	}
}

// extInfo is a parsed TensorProto.external_data list.
type extInfo struct {
	location       string
	offset, length int64
	hasLength      bool
}

func parseExternalData(entries []*onnxpb.StringStringEntryProto) (extInfo, error) {
	var info extInfo
	seen := map[string]bool{}
	for _, e := range entries {
		k, v := e.GetKey(), e.GetValue()
		if seen[k] {
			return info, fmt.Errorf("%w: external_data key %q appears twice", ErrMalformed, k)
		}
		seen[k] = true
		switch k {
		case "location":
			info.location = v
		case "offset", "length":
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x < 0 {
				return info, fmt.Errorf("%w: external_data %s %q is not a non-negative integer",
					ErrMalformed, k, v)
			}
			if k == "offset" {
				info.offset = x
			} else {
				info.length, info.hasLength = x, true
			}
		}
		// "checksum" and unknown keys are ignored (see the package doc).
	}
	if info.location == "" {
		return info, fmt.Errorf("%w: external_data has no location", ErrMalformed)
	}
	return info, nil
}

// extChunk is the most bytes of external data read at once: a tensor is
// decoded from the file a chunk at a time through one buffer (decoder.buf), so
// that loading a model holds its tensors and one chunk, never a tensor's bytes
// beside its elements (issue #26: a 221M-parameter model peaked at 1.8x its
// plan on the host). A multiple of every element size.
const extChunk = 4 << 20

// readExternal reads an external tensor of dtype dt and shape (size bytes)
// after checking the location is a plain file inside the model's folder and
// that the range lies inside it.
func (d *decoder) readExternal(tp *onnxpb.TensorProto, dt tensor.DType, shape []int64, size int64) (*tensor.Tensor, error) {
	info, err := parseExternalData(tp.GetExternalData())
	if err != nil {
		return nil, err
	}
	if info.hasLength && info.length != size {
		return nil, fmt.Errorf("%w: external data length %d, but the dims need %d bytes",
			ErrMalformed, info.length, size)
	}
	if d.dir == "" {
		return nil, fmt.Errorf("%w: tensor has external data (%q) but no model folder was given",
			ErrUnsafePath, info.location)
	}
	if d.extRead+size > d.opts.MaxExternalBytes {
		return nil, fmt.Errorf("%w: external data over the limit of %d bytes (LoadOptions.MaxExternalBytes)",
			ErrTooLarge, d.opts.MaxExternalBytes)
	}
	f, err := d.openExternal(info.location)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("external data %q: %w", info.location, err)
	}
	// Compare without overflow: offset and size are non-negative.
	if info.offset > st.Size() || size > st.Size()-info.offset {
		return nil, fmt.Errorf("%w: external data %q: offset %d + length %d runs past the end of "+
			"the file (%d bytes)", ErrMalformed, info.location, info.offset, size, st.Size())
	}
	t := tensor.New(dt, shape...) // bounded by the file's size, checked above
	if d.buf == nil {
		d.buf = make([]byte, extChunk)
	}
	for done := int64(0); done < size; {
		chunk := d.buf[:min(size-done, extChunk)]
		if _, err := f.ReadAt(chunk, info.offset+done); err != nil {
			return nil, fmt.Errorf("external data %q: %w", info.location, err)
		}
		t.DecodeAt(done/int64(dt.Size()), chunk)
		done += int64(len(chunk))
	}
	d.extRead += size
	return t, nil
}

// openExternal opens location (relative to the model's folder) after refusing
// absolute paths, paths that leave the folder, and symbolic links anywhere on
// the way.
func (d *decoder) openExternal(location string) (*os.File, error) {
	if d.ext == nil {
		d.ext = &extFiles{dir: d.dir, files: map[string]*os.File{}}
	}
	e := d.ext
	if f, ok := e.files[location]; ok {
		return f, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: external data location %q %s", ErrUnsafePath, location, why)
	}
	// Check both separators: a file written on Windows may use either.
	slashed := strings.ReplaceAll(location, `\`, "/")
	switch {
	case filepath.IsAbs(location) || strings.HasPrefix(slashed, "/") || filepath.VolumeName(location) != "":
		return nil, bad("is an absolute path; it must be relative to the model's folder")
	case strings.ContainsRune(location, 0):
		return nil, bad("contains a NUL byte")
	}
	for _, part := range strings.Split(slashed, "/") {
		if part == ".." {
			return nil, bad("climbs out of the model's folder with \"..\"")
		}
	}
	rel := filepath.Clean(filepath.FromSlash(slashed))
	if !filepath.IsLocal(rel) {
		return nil, bad("is not a path inside the model's folder")
	}
	if e.root == nil {
		// Resolve the folder to an absolute path so that it and the resolved
		// location below are compared in the same form.
		abs, err := filepath.Abs(e.dir)
		if err != nil {
			return nil, fmt.Errorf("external data %q: %w", location, err)
		}
		e.dir = abs
		root, err := os.OpenRoot(e.dir)
		if err != nil {
			return nil, fmt.Errorf("external data %q: %w", location, err)
		}
		e.root = root
		real, err := filepath.EvalSymlinks(e.dir)
		if err != nil {
			return nil, fmt.Errorf("external data %q: %w", location, err)
		}
		e.realDir = real
	}
	// Refuse a symbolic link at any component, naming it: even one that stays
	// inside the folder today is an indirection a hostile archive could retarget.
	parts := strings.Split(rel, string(filepath.Separator))
	for i := range parts {
		prefix := filepath.Join(parts[:i+1]...)
		st, err := e.root.Lstat(prefix)
		if err != nil {
			return nil, e.fileErr(location, err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return nil, bad(fmt.Sprintf("goes through %q, a symbolic link", prefix))
		}
	}
	// Belt and braces: the fully resolved path must still be inside the folder.
	resolved, err := filepath.EvalSymlinks(filepath.Join(e.dir, rel))
	if err != nil {
		return nil, e.fileErr(location, err)
	}
	if r, err := filepath.Rel(e.realDir, resolved); err != nil || !filepath.IsLocal(r) {
		return nil, bad(fmt.Sprintf("resolves to %q, outside the model's folder", resolved))
	}
	f, err := userfile.OpenIn(e.root, rel)
	if errors.Is(err, userfile.ErrNotRegular) {
		return nil, fmt.Errorf("%w: %w", ErrUnsafePath, e.fileErr(location, err))
	}
	if err != nil {
		return nil, e.fileErr(location, err)
	}
	e.files[location] = f
	return f, nil
}

// fileErr describes an error about the external data file location: of a
// *fs.PathError only the cause is kept, after the file's path, since its
// operation is Go's name for a system call (statat, openat), not the user's.
func (e *extFiles) fileErr(location string, err error) error {
	return fmt.Errorf("external data %q (%s): %w", location, filepath.Join(e.dir, filepath.FromSlash(location)),
		fserr.Cause(err))
}
