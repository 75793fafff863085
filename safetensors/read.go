package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/tensor"
)

// Read reads and validates the safetensors file at path.
func Read(path string) (*File, error) {
	f, err := userfile.Open(path)
	if err != nil {
		return nil, &Error{File: path, Err: fserr.Cause(err)} // Error names the file
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	// Check the header length against the real size before reading everything, so a
	// wrong path to a huge file fails fast.
	var prefix [8]byte
	if _, err := io.ReadFull(f, prefix[:]); err != nil {
		return nil, errorf(path, "", "file is %d bytes, shorter than the 8-byte header length",
			st.Size())
	}
	if _, err := headerLen(prefix[:], st.Size()); err != nil {
		return nil, wrap(path, "", err)
	}
	data := make([]byte, st.Size())
	copy(data, prefix[:])
	if _, err := io.ReadFull(f, data[8:]); err != nil {
		return nil, errorf(path, "", "reading: %w", err)
	}
	return decode(path, data)
}

// Decode decodes and validates a safetensors file held in memory. Errors name the
// file "<memory>".
func Decode(data []byte) (*File, error) { return decode("<memory>", data) }

// headerLen returns the validated header length from the 8-byte prefix of a file of
// size bytes.
func headerLen(prefix []byte, size int64) (int64, error) {
	n := binary.LittleEndian.Uint64(prefix)
	switch {
	case n > MaxHeaderBytes:
		return 0, fmt.Errorf("header length %d exceeds the limit of %d bytes", n, MaxHeaderBytes)
	case int64(n) > size-8:
		return 0, fmt.Errorf("header length %d exceeds the %d bytes after the length prefix", n,
			size-8)
	case n < 2:
		return 0, fmt.Errorf("header length %d is too short for a JSON object", n)
	}
	return int64(n), nil
}

// entry is one tensor's header record. Pointers tell a missing field from a zero one.
type entry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// header is the parsed JSON header: tensors in header order, and the metadata.
type header struct {
	names    []string
	entries  map[string]entry
	metadata map[string]string
}

// parseHeader parses the JSON object, rejecting duplicate keys (encoding/json would
// silently keep the last), unknown fields and anything after the object but padding.
func parseHeader(file string, js []byte) (*header, error) {
	h := &header{entries: map[string]entry{}, metadata: map[string]string{}}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errorf(file, "", "header is not a JSON object (starts %q)", clip(js, 16))
	}
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errorf(file, "", "bad header JSON: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errorf(file, "", "bad header JSON: key %v is not a string", tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, errorf(file, name, "bad header JSON: %w", err)
		}
		if name == metadataKey {
			if seenMeta {
				return nil, errorf(file, "", "%s appears twice in the header", metadataKey)
			}
			seenMeta = true
			if err := strictUnmarshal(raw, &h.metadata); err != nil {
				return nil, errorf(file, "", "%s must map strings to strings: %w", metadataKey, err)
			}
			if h.metadata == nil { // "__metadata__": null
				h.metadata = map[string]string{}
			}
			continue
		}
		if _, dup := h.entries[name]; dup {
			return nil, errorf(file, name, "appears twice in the header")
		}
		var e entry
		if err := strictUnmarshal(raw, &e); err != nil {
			return nil, errorf(file, name, "bad header entry %s: %w", clip(raw, 80), err)
		}
		h.names = append(h.names, name)
		h.entries[name] = e
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, errorf(file, "", "bad header JSON: %w", err)
	}
	// The format pads the header with spaces; allow any JSON whitespace, nothing else.
	rest := js[dec.InputOffset():]
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, errorf(file, "", "bad header JSON: trailing data %q after the object",
			clip(rest, 16))
	}
	return h, nil
}

// strictUnmarshal is json.Unmarshal that rejects unknown fields and trailing data.
func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// span is one tensor's validated place in the data section.
type span struct {
	name       string
	dt         tensor.DType
	shape      []int64
	begin, end int64
}

// decode validates data as a whole safetensors file named file and decodes it.
func decode(file string, data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, errorf(file, "", "file is %d bytes, shorter than the 8-byte header length",
			len(data))
	}
	n, err := headerLen(data[:8], int64(len(data)))
	if err != nil {
		return nil, wrap(file, "", err)
	}
	h, err := parseHeader(file, data[8:8+n])
	if err != nil {
		return nil, err
	}
	body := data[8+n:]
	spans := make([]span, 0, len(h.names))
	for _, name := range h.names {
		s, err := checkEntry(name, h.entries[name], int64(len(body)))
		if err != nil {
			return nil, wrap(file, name, err)
		}
		spans = append(spans, s)
	}
	// In data order, each tensor must start at or after the end of the one before.
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		if spans[i].end != spans[j].end {
			return spans[i].end < spans[j].end
		}
		return spans[i].name < spans[j].name
	})
	for i := 1; i < len(spans); i++ {
		p, s := spans[i-1], spans[i]
		if s.begin < p.end {
			return nil, errorf(file, s.name, "data_offsets [%d, %d] overlap tensor %q at [%d, %d]",
				s.begin, s.end, p.name, p.begin, p.end)
		}
	}
	f := &File{Path: file, Tensors: make(map[string]*tensor.Tensor, len(spans)),
		Metadata: h.metadata}
	for _, s := range spans {
		t, err := tensor.Decode(s.dt, s.shape, body[s.begin:s.end])
		if err != nil { // unreachable after checkEntry; kept so a bug is an error, not a panic
			return nil, wrap(file, s.name, err)
		}
		f.Tensors[s.name] = t
	}
	f.Names = h.names
	return f, nil
}

// checkEntry validates one header record against a data section of size bytes.
func checkEntry(name string, e entry, size int64) (span, error) {
	switch {
	case name == "":
		return span{}, errors.New("empty tensor name")
	case e.DType == nil:
		return span{}, errors.New(`header entry has no "dtype" (or it is null)`)
	case e.Shape == nil:
		return span{}, errors.New(`header entry has no "shape" (or it is null)`)
	case e.DataOffsets == nil:
		return span{}, errors.New(`header entry has no "data_offsets" (or it is null)`)
	}
	dt, err := parseDType(*e.DType)
	if err != nil {
		return span{}, err
	}
	shape := *e.Shape
	if len(shape) > maxRank {
		return span{}, fmt.Errorf("rank %d exceeds the limit of %d", len(shape), maxRank)
	}
	numel, err := tensor.Numel(shape)
	if err != nil {
		return span{}, err
	}
	// Numel lets a huge dim through next to a zero; no real tensor has one.
	for _, d := range shape {
		if d > tensor.MaxElements {
			return span{}, fmt.Errorf("dimension %d in shape %v exceeds %d",
				d, shape, int64(tensor.MaxElements))
		}
	}
	off := *e.DataOffsets
	if len(off) != 2 {
		return span{}, fmt.Errorf("data_offsets %v must be [begin, end]", off)
	}
	begin, end := off[0], off[1]
	if begin < 0 || end < begin || end > size {
		return span{}, fmt.Errorf("data_offsets [%d, %d] out of range of the %d-byte data section",
			begin, end, size)
	}
	if want := numel * int64(dt.Size()); end-begin != want {
		return span{}, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but %s%s needs %d",
			begin, end, end-begin, *e.DType, tensor.ShapeString(shape), want)
	}
	return span{name: name, dt: dt, shape: shape, begin: begin, end: end}, nil
}

// clip returns at most n bytes of b, for quoting untrusted input in errors.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
