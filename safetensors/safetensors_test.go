package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// refDir holds copies of ../shared/models' reference files; tests never read outside
// the repository.
const refDir = "../testdata/ref"

// allDTypes returns one tensor per dtype, with values that exercise each encoding
// (negative, fractional, extreme, NaN and infinities where the dtype has them).
func allDTypes() map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{
		"f32": tensor.FromFloats(tensor.F32, []int64{2, 3}, []float64{0, -1.5, 3.25, math.Inf(1),
			math.NaN(), 1e-30}),
		"f16": tensor.FromFloats(tensor.F16, []int64{4}, []float64{1, -2.5, 65504, 6e-8}),
		"bf16": tensor.FromFloats(tensor.BF16, []int64{2, 2}, []float64{1, -3.140625, 1e30,
			math.Inf(-1)}),
		"f64": tensor.FromFloats(tensor.F64, []int64{3}, []float64{math.Pi, -math.MaxFloat64,
			math.SmallestNonzeroFloat64}),
		"i64": tensor.FromInts(tensor.I64, []int64{2, 2}, []int64{math.MinInt64, -1, 0,
			math.MaxInt64}),
		"i32":    tensor.FromInts(tensor.I32, []int64{3}, []int64{math.MinInt32, 7, math.MaxInt32}),
		"i8":     tensor.FromInts(tensor.I8, []int64{3}, []int64{-128, 0, 127}),
		"u8":     tensor.FromInts(tensor.U8, []int64{3}, []int64{0, 1, 255}),
		"bool":   tensor.FromInts(tensor.Bool, []int64{1, 3}, []int64{1, 0, 1}),
		"scalar": tensor.Scalar(tensor.F32, 2.5),
		"empty":  tensor.New(tensor.F32, 0, 4),
	}
}

func TestRoundTripAllDTypes(t *testing.T) {
	ts := allDTypes()
	meta := map[string]string{"format": "pt", "step": "12", "quote\"<&>": "é\n"}
	path := filepath.Join(t.TempDir(), "all.safetensors")
	if err := Write(path, nil, ts, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := sortedNames(ts); strings.Join(f.Names, ",") != strings.Join(want, ",") {
		t.Errorf("Names = %v, want %v", f.Names, want)
	}
	for name, want := range ts {
		got, err := f.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if !tensor.Equal(got, want) {
			t.Errorf("%s: got %v %v F=%v I=%v, want F=%v I=%v", name, got.DType, got.Shape, got.F,
				got.I, want.F, want.I)
		}
	}
	if len(f.Metadata) != len(meta) {
		t.Errorf("Metadata = %v, want %v", f.Metadata, meta)
	}
	for k, v := range meta {
		if f.Metadata[k] != v {
			t.Errorf("Metadata[%q] = %q, want %q", k, f.Metadata[k], v)
		}
	}
	if _, err := f.Get("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Get(nope) error = %v, want one naming the tensor", err)
	}
}

func TestEncodeDeterministic(t *testing.T) {
	ts := allDTypes()
	a, err := Encode(nil, ts, map[string]string{"b": "2", "a": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// A different order of names must not change the bytes.
	names := sortedNames(ts)
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	b, err := Encode(names, ts, map[string]string{"a": "1", "b": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("Encode is not deterministic")
	}
	n := binary.LittleEndian.Uint64(a)
	if (8+n)%8 != 0 {
		t.Errorf("data starts at %d, not 8-byte aligned", 8+n)
	}
	hdr := string(a[8 : 8+n])
	if !strings.HasPrefix(hdr,
		`{"__metadata__":{"a":"1","b":"2"},`+
			`"bf16":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}`) {
		t.Errorf("header starts %q", hdr[:min(len(hdr), 120)])
	}
	if strings.TrimRight(hdr, " ") != hdr[:strings.LastIndexByte(hdr, '}')+1] {
		t.Errorf("header padding is not spaces: %q", hdr[len(hdr)-8:])
	}
}

func TestEncodeSubsetAndNoMetadata(t *testing.T) {
	ts := allDTypes()
	data, err := Encode([]string{"u8", "i8"}, ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	want := `{"i8":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},` +
		`"u8":{"dtype":"U8","shape":[3],"data_offsets":[3,6]}}`
	if got := strings.TrimRight(string(data[8:8+n]), " "); got != want {
		t.Errorf("header = %s\nwant     %s", got, want)
	}
	if got := data[8+n:]; !bytes.Equal(got, []byte{0x80, 0, 0x7f, 0, 1, 0xff}) {
		t.Errorf("data = %x", got)
	}
}

func TestEncodeErrors(t *testing.T) {
	good := tensor.New(tensor.F32, 2)
	tests := []struct {
		name    string
		names   []string
		tensors map[string]*tensor.Tensor
		want    string
	}{
		{"missing", []string{"w"}, map[string]*tensor.Tensor{},
			`tensor "w": listed in names but missing`},
		{"dup", []string{"w", "w"}, map[string]*tensor.Tensor{"w": good},
			`tensor "w": listed twice`},
		{"reserved", nil, map[string]*tensor.Tensor{metadataKey: good}, "reserved"},
		{"empty name", nil, map[string]*tensor.Tensor{"": good}, "empty tensor name"},
		{"bad dtype", nil, map[string]*tensor.Tensor{"w": {DType: tensor.Invalid, Shape: []int64{1},
			I: []int64{0}}}, `tensor "w": dtype invalid`},
		{"short", nil, map[string]*tensor.Tensor{"w": {DType: tensor.F32, Shape: []int64{3},
			F: []float64{1}}}, `tensor "w": f32[3] holds 1 elements, want 3`},
		{"wrong slice", nil, map[string]*tensor.Tensor{"w": {DType: tensor.I64, Shape: []int64{1},
			F: []float64{1}}}, `tensor "w": i64[1] holds 0 elements`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Encode(tc.names, tc.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "<memory>" {
				t.Errorf("error %v is not an *Error naming <memory>", err)
			}
		})
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ts := allDTypes()
	// An invalid tensor: nothing may be created.
	bad := map[string]*tensor.Tensor{"w": {DType: tensor.F32, Shape: []int64{3}}}
	path := filepath.Join(dir, "bad.safetensors")
	if err := Write(path, nil, bad, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Write error = %v, want one naming %s", err, path)
	}
	// The rename fails (the target is a non-empty directory): the temp file must go.
	target := filepath.Join(dir, "isdir.safetensors")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(target, nil, ts, nil); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	// A missing directory fails cleanly too.
	if err := Write(filepath.Join(dir, "no", "such.safetensors"), nil, ts, nil); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "isdir.safetensors" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v after failed writes, want only isdir.safetensors", names)
	}
}

func TestWriteReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	one := map[string]*tensor.Tensor{"w": tensor.FromFloats(tensor.F32, []int64{1}, []float64{1})}
	two := map[string]*tensor.Tensor{"w": tensor.FromFloats(tensor.F32, []int64{2}, []float64{2,
		3})}
	if err := Write(path, nil, one, nil); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, nil, two, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Tensors["w"].F; len(got) != 2 || got[1] != 3 {
		t.Errorf("w = %v after overwrite, want [2 3]", got)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, %v; want 0644", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want 1 (temp files left?)", len(entries))
	}
}

func TestReadReferenceFiles(t *testing.T) {
	type want struct {
		dt    tensor.DType
		shape []int64
	}
	files := map[string]map[string]want{
		"gpt_mini.ref.safetensors": {
			"input_ids": {tensor.I64, []int64{2, 16}},
			"labels":    {tensor.I64, []int64{2, 16}},
			"logits":    {tensor.F32, []int64{2, 16, 512}},
			"loss":      {tensor.F32, []int64{1}},
		},
		"llama_mini.ref.safetensors": {
			"input_ids": {tensor.I64, []int64{2, 16}},
			"logits":    {tensor.F32, []int64{2, 16, 512}},
			"loss":      {tensor.F32, []int64{1}},
		},
		"gpt_mini_loss.ref.safetensors": {
			"input_ids": {tensor.I64, []int64{2, 16}},
			"loss":      {tensor.F32, []int64{1}},
		},
		"attn_mha_dense.ref.safetensors": {
			"x":   {tensor.F32, []int64{2, 64, 32}},
			"dy":  {tensor.F32, []int64{2, 64, 32}},
			"out": {tensor.F32, []int64{2, 64, 32}},
		},
		"attn_mha_dilated_paper.ref.safetensors": {
			"x":   {tensor.F32, []int64{2, 64, 32}},
			"out": {tensor.F32, []int64{2, 64, 32}},
		},
	}
	for file, keys := range files {
		t.Run(file, func(t *testing.T) {
			f, err := Read(filepath.Join(refDir, file))
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range keys {
				got, err := f.Get(name)
				if err != nil {
					t.Fatal(err)
				}
				if got.DType != w.dt ||
					tensor.ShapeString(got.Shape) != tensor.ShapeString(w.shape) {
					t.Errorf("%s: %v%s, want %v%s", name, got.DType, tensor.ShapeString(got.Shape),
						w.dt, tensor.ShapeString(w.shape))
				}
			}
			var params, grads int
			for _, n := range f.Names {
				params += b2i(strings.HasPrefix(n, "param."))
				grads += b2i(strings.HasPrefix(n, "grad."))
			}
			if grads == 0 {
				t.Errorf("no grad.* tensors among %d", len(f.Names))
			}
			if strings.Contains(file, "mini") && params != grads {
				t.Errorf("%d param.* tensors but %d grad.*", params, grads)
			}
			// Token ids are in the vocabulary and the loss is a plausible cross-entropy.
			if ids, ok := f.Tensors["input_ids"]; ok {
				for _, v := range ids.I {
					if v < 0 || v >= 512 {
						t.Fatalf("input_ids holds %d, outside the vocabulary of 512", v)
					}
				}
			}
			if loss, ok := f.Tensors["loss"]; ok && !(loss.F[0] > 0 && loss.F[0] < 20) {
				t.Errorf("loss = %v, want a cross-entropy in (0, 20)", loss.F[0])
			}
			// What we write reads back the same.
			data, err := Encode(f.Names, f.Tensors, f.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			g, err := Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range f.Names {
				if !tensor.Equal(f.Tensors[n], g.Tensors[n]) {
					t.Errorf("%s changed in a write/read round trip", n)
				}
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ent is one tensor's header entry, as the format writes it.
func ent(name, dtype, shape, offsets string) string {
	return fmt.Sprintf(`%q:{"dtype":%q,"shape":%s,"data_offsets":%s}`, name, dtype, shape, offsets)
}

// file assembles a safetensors file from a raw header and data section.
func file(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), data...)
}

func TestDecodeBadInput(t *testing.T) {
	huge := binary.LittleEndian.AppendUint64(nil, 1<<62)
	tests := []struct {
		name string
		data []byte
		want string // a substring of the error
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"short prefix", []byte{1, 2, 3}, "shorter than the 8-byte header length"},
		{"huge header length", append(huge, "{}"...), "exceeds the limit"},
		{"header past end", file("{}", nil)[:9], "exceeds the 1 bytes after the length prefix"},
		{"header length zero", file("", nil), "too short"},
		{"not an object", file(`[1,2]   `, nil), "not a JSON object"},
		{"bad JSON", file(`{"a":{"dtype":"F32",`, nil), "bad header"},
		{"trailing garbage", file(`{}xyz`, nil), "trailing data"},
		{"duplicate key", file("{"+ent("a", "U8", "[0]", "[0,0]")+","+ent("a", "U8", "[0]",
			"[0,0]")+"}", nil),
			`tensor "a": appears twice`},
		{"unknown dtype", file("{"+ent("a", "U16", "[1]", "[0,2]")+"}", make([]byte, 2)),
			`tensor "a": unknown dtype "U16"`},
		{"missing dtype", file(`{"a":{"shape":[1],"data_offsets":[0,2]}}`, make([]byte, 2)),
			`tensor "a": header entry has no "dtype"`},
		{"unknown field", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`,
			make([]byte, 1)),
			`tensor "a": bad header entry`},
		{"offsets out of range", file("{"+ent("w", "F32", "[4]", "[0,16]")+"}", make([]byte, 8)),
			`tensor "w": data_offsets [0, 16] out of range of the 8-byte data section`},
		{"negative offset", file("{"+ent("w", "U8", "[1]", "[-1,0]")+"}", make([]byte, 8)),
			`tensor "w": data_offsets [-1, 0] out of range`},
		{"reversed offsets", file("{"+ent("w", "U8", "[1]", "[4,3]")+"}", make([]byte, 8)),
			`out of range`},
		{"offset overflows", file("{"+ent("w", "U8", "[1]", "[0,18446744073709551615]")+"}", nil),
			`tensor "w": bad header entry`},
		{"three offsets", file("{"+ent("w", "U8", "[1]", "[0,1,2]")+"}", make([]byte, 2)),
			`must be [begin, end]`},
		{"overlap", file("{"+ent("a", "F32", "[2]", "[0,8]")+","+ent("b", "F32", "[2]",
			"[4,12]")+"}", make([]byte, 12)),
			`tensor "b": data_offsets [4, 12] overlap tensor "a" at [0, 8]`},
		{"wrong size for shape", file("{"+ent("w", "F32", "[2,3]", "[0,20]")+"}", make([]byte, 24)),
			`tensor "w": data_offsets [0, 20] hold 20 bytes, but F32[2,3] needs 24`},
		{"negative dim", file("{"+ent("w", "U8", "[-1]", "[0,0]")+"}", nil),
			`tensor "w": negative dimension`},
		{"too many elements", file("{"+ent("w", "U8", "[65536,65536,65536]", "[0,0]")+"}", nil),
			`tensor "w": shape`},
		{"huge dim beside zero", file("{"+ent("w", "U8", "[0,9000000000000]", "[0,0]")+"}", nil),
			`tensor "w": dimension 9000000000000`},
		{"fractional dim", file("{"+ent("w", "U8", "[1.5]", "[0,1]")+"}", make([]byte, 1)),
			`tensor "w": bad header entry`},
		{"metadata not strings", file(`{"__metadata__":{"a":1}}`, nil),
			`__metadata__ must map strings to strings`},
		{"metadata twice", file(`{"__metadata__":{},"__metadata__":{}}`, nil), `appears twice`},
		{"empty name", file("{"+ent("", "U8", "[0]", "[0,0]")+"}", nil), `empty tensor name`},
		{"entry not object", file(`{"w":[1,2]}`, nil), `tensor "w": bad header entry`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode(tc.data)
			if err == nil {
				t.Fatalf("Decode succeeded with %d tensors, want an error containing %q",
					len(f.Names), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "safetensors: <memory>: ") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestReadErrorsNameFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trunc.safetensors")
	good, err := Encode(nil, allDTypes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, good[:len(good)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Read(path)
	if err == nil || !strings.Contains(err.Error(), path+": tensor ") {
		t.Errorf("Read(truncated) error = %v, want one naming %s and a tensor", err, path)
	}
	if _, err := Read(filepath.Join(dir, "missing.safetensors")); err == nil || !errors.Is(err,
		os.ErrNotExist) {
		t.Errorf("Read(missing) error = %v, want ErrNotExist", err)
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Read(dir) error = %v", err)
	}
	empty := filepath.Join(dir, "empty.safetensors")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(empty); err == nil || !strings.Contains(err.Error(),
		empty+": file is 0 bytes") {
		t.Errorf("Read(empty) error = %v", err)
	}
}

func TestDecodeAcceptsGapsAndPadding(t *testing.T) {
	// Some writers align each tensor; a gap between tensors is not an error.
	data := file("{"+ent("a", "U8", "[1]", "[0,1]")+","+ent("b", "U8", "[1]", "[4,5]")+"}"+"  \n",
		[]byte{7, 0, 0, 0, 9})
	f, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Tensors["a"].I[0] != 7 || f.Tensors["b"].I[0] != 9 || len(f.Metadata) != 0 ||
		f.Metadata == nil {
		t.Errorf("decoded %+v", f)
	}
}

// FuzzDecode: any bytes decode to a file that survives a write and read, or give
// an *Error. The seeds are small (a few hundred bytes), so that a short run
// executes many inputs rather than minimizing megabytes (golang/go#51484): each
// reference file's header shape, with its first tensors cut to a few elements,
// and hand-made files. Crashers are kept under testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(refDir, "*.safetensors"))
	for _, p := range seeds {
		ref, err := Read(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(smallSeed(f, ref))
	}
	small, err := Encode(nil, allDTypes(), map[string]string{"k": "v"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	f.Add(file("{"+ent("a", "F16", "[2]", "[0,4]")+"}", []byte{1, 2, 3, 4}))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		// Anything accepted must survive a write and read unchanged.
		enc, err := Encode(got.Names, got.Tensors, got.Metadata)
		if err != nil {
			t.Fatalf("re-encoding a decoded file: %v", err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("decoding re-encoded file: %v", err)
		}
		for _, n := range got.Names {
			if !tensor.Equal(got.Tensors[n], again.Tensors[n]) {
				t.Fatalf("tensor %q changed in a round trip", n)
			}
		}
		for k, v := range got.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("metadata %q changed in a round trip", k)
			}
		}
	})
}

// smallSeed re-encodes the first four tensors of ref, each cut to at most four
// elements (dtypes, names and metadata kept).
func smallSeed(t testing.TB, ref *File) []byte {
	t.Helper()
	ts := map[string]*tensor.Tensor{}
	var names []string
	for _, name := range ref.Names[:min(4, len(ref.Names))] {
		x := ref.Tensors[name]
		n := min(4, x.Numel())
		c := &tensor.Tensor{DType: x.DType, Shape: []int64{int64(n)}}
		if x.F != nil {
			c.F = x.F[:n]
		}
		if x.I != nil {
			c.I = x.I[:n]
		}
		ts[name] = c
		names = append(names, name)
	}
	data, err := Encode(names, ts, ref.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestFuzzSeedsSmall(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(refDir, "*.safetensors"))
	if len(paths) == 0 {
		t.Fatal("no reference files")
	}
	for _, p := range paths {
		ref, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		seed := smallSeed(t, ref)
		if len(seed) > 1024 {
			t.Errorf("%s: seed of %d bytes", p, len(seed))
		}
		if _, err := Decode(seed); err != nil {
			t.Errorf("%s: seed does not decode: %v", p, err)
		}
	}
}

// TestEncodeRaw wants EncodeRaw's pieces, joined, to be Encode's bytes, with each
// tensor's data passed through uncopied, and its errors to name the tensor.
func TestEncodeRaw(t *testing.T) {
	ts := allDTypes()
	meta := map[string]string{"step": "3"}
	raw := map[string]Raw{}
	for name, x := range ts {
		raw[name] = Raw{DType: x.DType, Shape: x.Shape, Data: x.Encode()}
	}
	pieces, err := EncodeRaw(raw, meta)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Encode(nil, ts, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(pieces, nil); !bytes.Equal(got, want) {
		t.Errorf("EncodeRaw's %d bytes differ from Encode's %d", len(got), len(want))
	}
	if len(pieces) != len(raw)+1 || &pieces[1][0] != &raw["bf16"].Data[0] {
		t.Errorf("%d pieces, want the header and each tensor's own data in name order", len(pieces))
	}
	raw["f32"] = Raw{DType: tensor.F32, Shape: []int64{2, 3}, Data: make([]byte, 20)}
	if _, err := EncodeRaw(raw, nil); err == nil || !strings.Contains(err.Error(), `"f32"`) {
		t.Errorf("short data: error %v, want one naming \"f32\"", err)
	}
}
