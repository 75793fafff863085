// Package safetensors reads and writes the safetensors format
// (https://github.com/huggingface/safetensors): the reference tensors that `lcc check`
// compares against, and the weights and optimizer state of training checkpoints.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON, then the data
// section. The JSON maps each tensor name to {"dtype", "shape", "data_offsets"}, with
// offsets relative to the data section, plus an optional "__metadata__" object of
// string to string.
//
// Invariants:
//   - Reading never trusts the file: the header length is bounded (MaxHeaderBytes and
//     the file size), the header is scanned in place with at most 131072 tensors and
//     64 dims a shape (so decoding it costs about its own size in memory), every
//     dtype, shape and offset pair is checked (shapes with
//     tensor.Numel, offsets within the data section, no two tensors overlapping, the
//     byte count equal to shape × dtype size) before anything is allocated from it,
//     and every failure is an *Error naming the file and, where there is one, the
//     tensor. Bad input never panics.
//   - A large file need not be held whole: ReadHeader validates the header alone,
//     and Header.ReadTensors then streams the data section through one
//     ReadChunkBytes buffer into tensors the caller gives (stream.go).
//   - Writing is deterministic: the same tensors give the same bytes. "__metadata__"
//     comes first, then the tensors sorted by name, their data laid out back to back
//     in that order, and the header padded with spaces so the data starts 8-byte
//     aligned. Files are written atomically (temp file in the same directory, fsync,
//     rename, fsync of the directory), so a failed or interrupted write leaves either
//     the old file or none, never a partial one.
package safetensors

import (
	"errors"
	"fmt"
	"sort"

	"github.com/lcc-dev/lcc/tensor"
)

// MaxHeaderBytes bounds the JSON header. The format's reference implementation uses
// the same 100 MiB limit; real headers are kilobytes.
const MaxHeaderBytes = 100 << 20

// maxRank bounds the rank of a tensor read from a file; no model needs more, and it
// keeps a hostile header from making every shape a long list.
const maxRank = 64

// metadataKey is the reserved header key holding the file's string metadata.
const metadataKey = "__metadata__"

// File is a decoded safetensors file.
type File struct {
	// Path is the file it was read from, or "<memory>" for Decode. It only labels
	// errors.
	Path string
	// Names lists the tensors in header order. For files lcc writes, and for those
	// the Python library writes, that is sorted by name.
	Names []string
	// Tensors maps each name in Names to its tensor.
	Tensors map[string]*tensor.Tensor
	// Metadata is the header's "__metadata__" object; empty, never nil, when absent.
	Metadata map[string]string
}

// Get returns the named tensor, or an error naming the file and the tensor.
func (f *File) Get(name string) (*tensor.Tensor, error) {
	if t, ok := f.Tensors[name]; ok {
		return t, nil
	}
	return nil, &Error{File: f.Path, Tensor: name,
		Err: fmt.Errorf("no such tensor (the file has %d tensors)", len(f.Names))}
}

// Error is the error returned for malformed input or an unwritable file. Callers may
// match it with errors.As; Err holds the cause and can be unwrapped.
type Error struct {
	File   string // path, or "<memory>"
	Tensor string // tensor name, or "" when the problem is not about one tensor
	Err    error
}

// Error formats as `safetensors: FILE: tensor "NAME": CAUSE`.
func (e *Error) Error() string {
	if e.Tensor == "" {
		return fmt.Sprintf("safetensors: %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("safetensors: %s: tensor %q: %v", e.File, e.Tensor, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// The format's dtype strings and lcc's dtypes, one row each. Formats lcc has no
// dtype for (U16, F8_E4M3, ...) are rejected by name.
var dtypeTable = []struct {
	name string
	dt   tensor.DType
}{
	{"F32", tensor.F32},
	{"F16", tensor.F16},
	{"BF16", tensor.BF16},
	{"F64", tensor.F64},
	{"I64", tensor.I64},
	{"I32", tensor.I32},
	{"I8", tensor.I8},
	{"U8", tensor.U8},
	{"BOOL", tensor.Bool},
}

// parseDType maps a format dtype string to lcc's dtype.
func parseDType(s string) (tensor.DType, error) {
	for _, r := range dtypeTable {
		if r.name == s {
			return r.dt, nil
		}
	}
	names := make([]string, len(dtypeTable))
	for i, r := range dtypeTable {
		names[i] = r.name
	}
	return tensor.Invalid, fmt.Errorf("unknown dtype %q (want one of %v)", s, names)
}

// formatDType is the inverse of parseDType.
func formatDType(dt tensor.DType) (string, error) {
	for _, r := range dtypeTable {
		if r.dt == dt {
			return r.name, nil
		}
	}
	return "", fmt.Errorf("dtype %v has no safetensors encoding", dt)
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// errorf builds an *Error.
func errorf(file, name, format string, args ...any) error {
	return &Error{File: file, Tensor: name, Err: fmt.Errorf(format, args...)}
}

// wrap labels err with the file and tensor unless it already is an *Error.
func wrap(file, name string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{File: file, Tensor: name, Err: err}
}
