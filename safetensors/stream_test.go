package safetensors

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// stream reads data as ReadHeader and ReadTensors do, decoding every tensor
// but those skip names into a new tensor, and returns them and the bytes read.
func stream(data []byte, skip ...string) (map[string]*tensor.Tensor, int64, error) {
	r := &countingReader{r: bytes.NewReader(data)}
	h, err := ReadHeader("<memory>", r, int64(len(data)))
	if err != nil {
		return nil, r.n, err
	}
	out := map[string]*tensor.Tensor{}
	err = h.ReadTensors(r, func(name string) *tensor.Tensor {
		for _, s := range skip {
			if s == name {
				return nil
			}
		}
		e := h.Entries[name]
		out[name] = tensor.New(e.DType, e.Shape...)
		return out[name]
	})
	return out, r.n, err
}

// TestReadTensors: streaming a file gives Decode's tensors, reading every
// byte of the file once (a caller hashes them on the way), a tensor of several
// chunks among them, one skipped or gaps between them.
func TestReadTensors(t *testing.T) {
	ts := allDTypes()
	big := tensor.New(tensor.F32, ReadChunkBytes/4+3) // two chunks, the second of 3 elements
	for i := range big.F {
		big.F[i] = float64(i % 1000)
	}
	ts["big"] = big
	good, err := Encode(nil, ts, map[string]string{"step": "3"})
	if err != nil {
		t.Fatal(err)
	}
	gaps := file("{"+ent("a", "U8", "[1]", "[0,1]")+","+ent("b", "U8", "[1]", "[4,5]")+"}"+"  \n",
		[]byte{7, 0, 0, 0, 9, 1, 2})
	for _, tc := range []struct {
		name string
		data []byte
		skip []string
	}{{"all dtypes", good, nil}, {"big skipped", good, []string{"big"}}, {"gaps", gaps, nil}} {
		want, err := Decode(tc.data)
		if err != nil {
			t.Fatal(err)
		}
		got, n, err := stream(tc.data, tc.skip...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n != int64(len(tc.data)) {
			t.Errorf("%s: read %d bytes of %d", tc.name, n, len(tc.data))
		}
		if len(got) != len(want.Tensors)-len(tc.skip) {
			t.Errorf("%s: %d tensors, want %d", tc.name, len(got), len(want.Tensors)-len(tc.skip))
		}
		for name, x := range got {
			if !tensor.Equal(x, want.Tensors[name]) {
				t.Errorf("%s: %q differs from Decode's", tc.name, name)
			}
		}
	}
	if _, _, err := stream(good[:len(good)-5]); err == nil {
		t.Error("a truncated file streamed without an error")
	}
}

// TestReadTensorsAgreesWithDecode: every prefix of a file, and the file with
// each header byte changed, streams without an error exactly when Decode
// decodes it.
func TestReadTensorsAgreesWithDecode(t *testing.T) {
	good, err := Encode(nil, allDTypes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var inputs [][]byte
	for n := range len(good) {
		inputs = append(inputs, good[:n])
	}
	hl := 8 + int(binary.LittleEndian.Uint64(good))
	for i := 8; i < min(hl, len(good)); i++ {
		b := bytes.Clone(good)
		b[i] ^= 0x5a
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		_, derr := Decode(in)
		_, _, serr := stream(in)
		if (derr == nil) != (serr == nil) {
			t.Fatalf("%d bytes: Decode: %v, streamed: %v", len(in), derr, serr)
		}
	}
}
