package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/tensor"
)

// Encode returns the safetensors bytes of the tensors listed in names (nil names means
// every tensor in the map; tensors may hold more than names) and metadata (nil or
// empty for none). The bytes depend only on the arguments: tensors are sorted by
// name whatever the order of names. Errors name the offending tensor.
func Encode(names []string, tensors map[string]*tensor.Tensor,
	metadata map[string]string) ([]byte, error) {
	return encode("<memory>", names, tensors, metadata)
}

// Write writes Encode's bytes to path atomically: a temp file in the same directory
// is written, fsynced and renamed over path, then the directory is fsynced. On error
// the temp file is removed and path is untouched. The file gets mode 0644.
func Write(path string, names []string, tensors map[string]*tensor.Tensor,
	metadata map[string]string) error {
	data, err := encode(path, names, tensors, metadata)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return &Error{File: path, Err: err}
	}
	return nil
}

// encode is Encode with a file name for errors.
func encode(file string, names []string, tensors map[string]*tensor.Tensor,
	metadata map[string]string) ([]byte, error) {
	if names == nil {
		names = sortedNames(tensors)
	}
	sel := make(map[string]*tensor.Tensor, len(names))
	for _, name := range names {
		if err := checkTensor(name, tensors[name], sel); err != nil {
			return nil, wrap(file, name, err)
		}
		sel[name] = tensors[name]
	}
	raw := make(map[string]Raw, len(sel))
	for name, t := range sel {
		raw[name] = Raw{DType: t.DType, Shape: t.Shape, Data: t.Encode()}
	}
	pieces, err := encodeRaw(file, raw, metadata)
	if err != nil {
		return nil, err
	}
	return bytes.Join(pieces, nil), nil
}

// Raw is a tensor as a file holds it: its dtype, shape and little-endian bytes.
type Raw struct {
	DType tensor.DType
	Shape []int64
	Data  []byte
}

// EncodeRaw returns the safetensors file of tensors and metadata as pieces to
// write one after the other: the header, then each tensor's Data (not copied),
// sorted by name. They are the bytes Encode returns for the same tensors.
func EncodeRaw(tensors map[string]Raw, metadata map[string]string) ([][]byte, error) {
	return encodeRaw("<memory>", tensors, metadata)
}

// encodeRaw is EncodeRaw with a file name for errors.
func encodeRaw(file string, tensors map[string]Raw, metadata map[string]string) ([][]byte, error) {
	for _, name := range sortedNames(tensors) {
		if err := checkRaw(name, tensors[name]); err != nil {
			return nil, wrap(file, name, err)
		}
	}
	// The header is written by hand: encoding/json would sort "__metadata__" among
	// the tensor names instead of first, and this keeps the bytes obviously fixed.
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		sep()
		writeString(&hdr, metadataKey)
		hdr.WriteString(":{")
		for i, k := range sortedNames(metadata) {
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeString(&hdr, k)
			hdr.WriteByte(':')
			writeString(&hdr, metadata[k])
		}
		hdr.WriteByte('}')
	}
	order := sortedNames(tensors)
	var off int64
	for _, name := range order {
		t := tensors[name]
		ds, _ := formatDType(t.DType) // checked by checkRaw
		sep()
		writeString(&hdr, name)
		fmt.Fprintf(&hdr, `:{"dtype":%q,"shape":[`, ds)
		for i, d := range t.Shape {
			if i > 0 {
				hdr.WriteByte(',')
			}
			fmt.Fprint(&hdr, d)
		}
		n := int64(len(t.Data))
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, off, off+n)
		off += n
	}
	hdr.WriteByte('}')
	// Pad with spaces so the data section starts 8-byte aligned (the prefix is 8).
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	if hdr.Len() > MaxHeaderBytes {
		return nil, errorf(file, "", "header of %d bytes exceeds the limit of %d",
			hdr.Len(), MaxHeaderBytes)
	}

	head := make([]byte, 8, 8+hdr.Len())
	binary.LittleEndian.PutUint64(head, uint64(hdr.Len()))
	pieces := [][]byte{append(head, hdr.Bytes()...)}
	for _, name := range order {
		pieces = append(pieces, tensors[name].Data)
	}
	return pieces, nil
}

// checkRaw validates one raw tensor to be written.
func checkRaw(name string, t Raw) error {
	switch {
	case name == "":
		return fmt.Errorf("empty tensor name")
	case name == metadataKey:
		return fmt.Errorf("%q is reserved for metadata", metadataKey)
	}
	if _, err := formatDType(t.DType); err != nil {
		return err
	}
	n, err := tensor.Numel(t.Shape)
	if err != nil {
		return err
	}
	if want := n * int64(t.DType.Size()); int64(len(t.Data)) != want {
		return fmt.Errorf("%v%s holds %d bytes, want %d", t.DType, tensor.ShapeString(t.Shape), len(t.Data), want)
	}
	return nil
}

// checkTensor validates one tensor to be written (its name and bytes: checkRaw);
// sel holds those already accepted.
func checkTensor(name string, t *tensor.Tensor, sel map[string]*tensor.Tensor) error {
	if t == nil {
		return fmt.Errorf("listed in names but missing from the tensor map (or nil)")
	}
	if _, dup := sel[name]; dup {
		return fmt.Errorf("listed twice in names")
	}
	if _, err := formatDType(t.DType); err != nil {
		return err
	}
	n, err := tensor.Numel(t.Shape)
	if err != nil {
		return err
	}
	have, other := len(t.I), len(t.F)
	if t.DType.IsFloat() {
		have, other = len(t.F), len(t.I)
	}
	if int64(have) != n || other != 0 {
		return fmt.Errorf("%v%s holds %d elements, want %d",
			t.DType, tensor.ShapeString(t.Shape), have, n)
	}
	return nil
}

// writeString appends s as a JSON string, without encoding/json's HTML escaping.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode appends '\n'
}
