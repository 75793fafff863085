package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

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
	DType       *string
	Shape       *[]int64
	DataOffsets *[]int64
}

// header is the parsed JSON header: tensors in header order, and the metadata.
type header struct {
	names    []string
	entries  []entry // entries[i] is names[i]'s
	metadata map[string]string
}

// maxTensors bounds the tensors of one file. Real files hold at most tens of
// thousands (a sharded checkpoint's file, an lcc checkpoint's weights and moments);
// a header of a million empty entries is an attack on memory (each costs ~200 bytes
// decoded, the header 50).
const maxTensors = 1 << 17

// parseHeader parses the JSON object, rejecting duplicate keys (encoding/json would
// silently keep the last), unknown fields and anything after the object but
// padding. It scans the bytes itself (scanner): nothing is held but the result, and
// a list (a shape, offsets) stops at its limit, so a 100 MB header of a hundred
// thousand entries or of one long shape needs about its own size in memory, where
// encoding/json's copies of every entry and whole decoded lists took ten times it.
func parseHeader(file string, js []byte) (*header, error) {
	h := &header{metadata: map[string]string{}}
	p := &scanner{js: js}
	if !p.next('{') {
		return nil, errorf(file, "", "header is not a JSON object (starts %q)", clip(js, 16))
	}
	seen := map[string]bool{}
	for first := true; !p.next('}'); first = false {
		if !first && !p.next(',') {
			return nil, errorf(file, "", "bad header JSON: %v", p.fail("',' or '}'"))
		}
		name, err := p.str()
		if err == nil && !p.next(':') {
			err = p.fail("':'")
		}
		if err != nil {
			return nil, errorf(file, "", "bad header JSON: %w", err)
		}
		if seen[name] {
			if name == metadataKey {
				return nil, errorf(file, "", "%s appears twice in the header", metadataKey)
			}
			return nil, errorf(file, name, "appears twice in the header")
		}
		seen[name] = true
		if name == metadataKey {
			if err := p.metadata(h.metadata); err != nil {
				return nil, errorf(file, "", "%s must map strings to strings: %w", metadataKey, err)
			}
			continue
		}
		if len(h.names) == maxTensors {
			return nil, errorf(file, name, "more than %d tensors in the header", maxTensors)
		}
		e, err := p.entry()
		if err != nil {
			return nil, errorf(file, name, "bad header entry: %w", err)
		}
		h.names = append(h.names, name)
		h.entries = append(h.entries, e)
	}
	// The format pads the header with spaces; allow any JSON whitespace, nothing else.
	if p.skip(); p.i < len(js) {
		return nil, errorf(file, "", "bad header JSON: trailing data %q after the object",
			clip(js[p.i:], 16))
	}
	return h, nil
}

// scanner reads the header's JSON, a byte offset at a time.
type scanner struct {
	js []byte
	i  int
}

// skip passes JSON whitespace.
func (p *scanner) skip() {
	for p.i < len(p.js) && strings.IndexByte(" \t\r\n", p.js[p.i]) >= 0 {
		p.i++
	}
}

// next consumes byte c after whitespace, reporting whether it was there.
func (p *scanner) next(c byte) bool {
	p.skip()
	if p.i < len(p.js) && p.js[p.i] == c {
		p.i++
		return true
	}
	return false
}

// null consumes a JSON null, reporting whether it was there.
func (p *scanner) null() bool {
	p.skip()
	if bytes.HasPrefix(p.js[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// fail is the error of finding something other than want at the offset.
func (p *scanner) fail(want string) error {
	if p.i >= len(p.js) {
		return fmt.Errorf("unexpected end of JSON input, want %s", want)
	}
	return fmt.Errorf("offset %d: want %s, found %q", p.i, want, clip(p.js[p.i:], 8))
}

// str reads a JSON string. Escapes are decoded by encoding/json, on the string alone.
func (p *scanner) str() (string, error) {
	if !p.next('"') {
		return "", p.fail("a string")
	}
	start, escaped := p.i-1, false
	for ; p.i < len(p.js) && p.js[p.i] != '"'; p.i++ {
		if p.js[p.i] == '\\' {
			escaped = true
			p.i++
		}
	}
	if p.i >= len(p.js) {
		return "", p.fail("the end of a string")
	}
	p.i++
	raw := p.js[start:p.i]
	if !escaped && utf8.Valid(raw) && bytes.IndexFunc(raw, func(r rune) bool { return r < 0x20 }) < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("string %s: %w", clip(raw, 16), err)
	}
	return s, nil
}

// metadata reads "__metadata__": an object of strings, or null.
func (p *scanner) metadata(into map[string]string) error {
	if p.null() {
		return nil
	}
	if !p.next('{') {
		return p.fail("an object")
	}
	for first := true; !p.next('}'); first = false {
		if !first && !p.next(',') {
			return p.fail("',' or '}'")
		}
		k, err := p.str()
		if err == nil && !p.next(':') {
			err = p.fail("':'")
		}
		if err != nil {
			return err
		}
		v, err := p.str()
		if err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		into[k] = v
	}
	return nil
}

// entry reads a tensor's {"dtype", "shape", "data_offsets"}; null is an entry
// missing all three, which checkEntry reports, and so is a null field.
func (p *scanner) entry() (entry, error) {
	var e entry
	if p.null() {
		return e, nil
	}
	if !p.next('{') {
		return e, p.fail("an object")
	}
	for first := true; !p.next('}'); first = false {
		if !first && !p.next(',') {
			return e, p.fail("',' or '}'")
		}
		k, err := p.str()
		if err == nil && !p.next(':') {
			err = p.fail("':'")
		}
		if err != nil {
			return e, err
		}
		switch {
		case p.null():
		case k == "dtype":
			s, err := p.str()
			if err != nil {
				return e, err
			}
			e.DType = &s
		case k == "shape":
			if e.Shape, err = p.ints("shape", maxRank); err != nil {
				return e, err
			}
		case k == "data_offsets":
			if e.DataOffsets, err = p.ints("data_offsets", 2); err != nil {
				return e, err
			}
		default:
			return e, fmt.Errorf("unknown field %q", k)
		}
	}
	return e, nil
}

// ints reads an array of at most limit 64-bit integers.
func (p *scanner) ints(what string, limit int) (*[]int64, error) {
	if !p.next('[') {
		return nil, fmt.Errorf("%s: %w", what, p.fail("an array"))
	}
	out := []int64{}
	for first := true; !p.next(']'); first = false {
		if !first && !p.next(',') {
			return nil, fmt.Errorf("%s: %w", what, p.fail("',' or ']'"))
		}
		if len(out) == limit {
			if what == "shape" {
				return nil, fmt.Errorf("rank exceeds the limit of %d", limit)
			}
			return nil, fmt.Errorf("%s %v... must be [begin, end]", what, out)
		}
		p.skip()
		start := p.i
		for p.i < len(p.js) && strings.IndexByte("+-0123456789.eE", p.js[p.i]) >= 0 {
			p.i++
		}
		if p.i == start {
			return nil, fmt.Errorf("%s: %w", what, p.fail("an integer"))
		}
		v, err := strconv.ParseInt(string(p.js[start:p.i]), 10, 64)
		if err != nil || p.js[start] == '+' || (p.js[start] == '0' && p.i-start > 1) {
			return nil, fmt.Errorf("%s holds %q, not a 64-bit integer", what, clip(p.js[start:p.i], 24))
		}
		out = append(out, v)
	}
	return &out, nil
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
	h, spans, err := layout(file, data[8:8+n], int64(len(data))-8-n)
	if err != nil {
		return nil, err
	}
	body := data[8+n:]
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

// layout parses the header js of file, whose data section holds size bytes,
// and validates every entry against it: the header and its tensors' spans in
// data order, no two overlapping.
func layout(file string, js []byte, size int64) (*header, []span, error) {
	h, err := parseHeader(file, js)
	if err != nil {
		return nil, nil, err
	}
	spans := make([]span, 0, len(h.names))
	for i, name := range h.names {
		s, err := checkEntry(name, h.entries[i], size)
		if err != nil {
			return nil, nil, wrap(file, name, err)
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
			return nil, nil, errorf(file, s.name, "data_offsets [%d, %d] overlap tensor %q at [%d, %d]",
				s.begin, s.end, p.name, p.begin, p.end)
		}
	}
	return h, spans, nil
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
