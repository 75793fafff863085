package safetensors

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lcc-dev/lcc/tensor"
)

// Streaming a file (issue #26). Read holds a file's bytes beside its decoded
// tensors, and a caller that puts the tensors somewhere holds them a third
// time. A training checkpoint is 16 bytes a parameter on disk (fp32 weight,
// master and two moments), so a resume that read it whole held 48 bytes a
// parameter beside the model, and more once the read buffer grew. ReadHeader
// reads and validates only the header; Header.ReadTensors then reads the data
// section in file order, ReadChunkBytes at a time, decoding each tensor into
// the tensor its caller gives (a model's own weights, in place) or skipping
// it, so that reading holds at most one chunk of the file's bytes. Every byte
// of the file passes through the reader, so a caller may hash it on the way.

// ReadChunkBytes is the most of a file's bytes ReadTensors holds at once: a
// multiple of every dtype's size, so that a chunk holds whole elements.
const ReadChunkBytes = 4 << 20

// Entry is one tensor of a file's header.
type Entry struct {
	DType tensor.DType
	Shape []int64
}

// Header is a file's validated header (every entry checked as Read checks
// it), read by ReadHeader.
type Header struct {
	// Path names the file in errors.
	Path string
	// Names lists the tensors in header order.
	Names []string
	// Entries maps each name in Names to its dtype and shape.
	Entries map[string]Entry
	// Metadata is the header's "__metadata__" object; empty, never nil.
	Metadata map[string]string
	spans    []span // the tensors in data order
	size     int64  // the data section's bytes
}

// ReadHeader reads the 8-byte length and the header of the safetensors file
// file from r, which holds size bytes in all, and validates them against that
// size (MaxHeaderBytes, every entry's dtype, shape and offsets, no overlaps)
// before it allocates anything from them. It leaves r at the data section,
// for ReadTensors.
func ReadHeader(file string, r io.Reader, size int64) (*Header, error) {
	var prefix [8]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, errorf(file, "", "file is %d bytes, shorter than the 8-byte header length", size)
	}
	n, err := headerLen(prefix[:], size)
	if err != nil {
		return nil, wrap(file, "", err)
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(r, js); err != nil {
		return nil, errorf(file, "", "reading the %d-byte header: %w", n, eof(err))
	}
	h, spans, err := layout(file, js, size-8-n)
	if err != nil {
		return nil, err
	}
	hd := &Header{Path: file, Names: h.names, Entries: make(map[string]Entry, len(spans)),
		Metadata: h.metadata, spans: spans, size: size - 8 - n}
	for _, s := range spans {
		hd.Entries[s.name] = Entry{DType: s.dt, Shape: s.shape}
	}
	return hd, nil
}

// ReadTensors reads h's data section from r, where ReadHeader left it, to its
// end, in file order and ReadChunkBytes at a time. For each tensor it asks
// into for the tensor to decode it into: one of the entry's dtype and shape
// (it panics on another: the caller's bug), or nil to skip the tensor's bytes.
// On an error the tensors into gave may hold part of the file.
func (h *Header) ReadTensors(r io.Reader, into func(name string) *tensor.Tensor) error {
	buf := make([]byte, min(ReadChunkBytes, h.size))
	var at int64 // the data section's bytes read
	for _, s := range h.spans {
		if err := skip(r, s.begin-at, buf); err != nil {
			return errorf(h.Path, s.name, "reading the bytes before it: %w", eof(err))
		}
		at = s.begin
		t := into(s.name)
		if t == nil {
			if err := skip(r, s.end-at, buf); err != nil {
				return errorf(h.Path, s.name, "reading: %w", eof(err))
			}
			at = s.end
			continue
		}
		if t.DType != s.dt || !slices.Equal(t.Shape, s.shape) {
			panic(fmt.Sprintf("lcc: BUG: safetensors: %q is %v%s, decoded into a %v%s", s.name, s.dt,
				tensor.ShapeString(s.shape), t.DType, tensor.ShapeString(t.Shape)))
		}
		size := int64(s.dt.Size())
		for at < s.end {
			n := min(int64(len(buf)), s.end-at)
			if _, err := io.ReadFull(r, buf[:n]); err != nil {
				return errorf(h.Path, s.name, "reading: %w", eof(err))
			}
			t.DecodeAt((at-s.begin)/size, buf[:n])
			at += n
		}
	}
	if err := skip(r, h.size-at, buf); err != nil {
		return errorf(h.Path, "", "reading the data section's end: %w", eof(err))
	}
	return nil
}

// skip reads n bytes from r through buf.
func skip(r io.Reader, n int64, buf []byte) error {
	for n > 0 {
		k := min(int64(len(buf)), n)
		if _, err := io.ReadFull(r, buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// eof says what an early end of the file is; other errors are as they are.
func eof(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the file ends early (truncated, or changed while it was read)")
	}
	return err
}
