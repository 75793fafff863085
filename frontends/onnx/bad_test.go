package onnx

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
)

// Helpers that build small models with the generated types.

func tensorType(elem onnxpb.TensorProto_DataType, dims ...any) *onnxpb.TypeProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{
				Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		case string:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{
				Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		}
	}
	return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
		ElemType: proto.Int32(int32(elem)), Shape: shape}}}
}

func valueInfo(name string, typ *onnxpb.TypeProto) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: typ}
}

func node(name, op string, ins, outs []string) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(op), Input: ins, Output: outs}
}

func f32Raw(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func rawTensor(name string, dt onnxpb.TensorProto_DataType, dims []int64, raw []byte) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(dt)), Dims: dims,
		RawData: raw}
}

// tinyModel is y = Relu(MatMul(x, w)), x f32[batch,2], w f32[2,2].
func tinyModel() *onnxpb.ModelProto {
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("tiny"),
			Node: []*onnxpb.NodeProto{
				node("mm", "MatMul", []string{"x", "w"}, []string{"h"}),
				node("relu", "Relu", []string{"h"}, []string{"y"}),
			},
			Initializer: []*onnxpb.TensorProto{
				rawTensor("w", onnxpb.TensorProto_FLOAT, []int64{2, 2}, f32Raw(1, 2, 3, 4)),
			},
			Input:  []*onnxpb.ValueInfoProto{valueInfo("x", tensorType(onnxpb.TensorProto_FLOAT, "batch", 2))},
			Output: []*onnxpb.ValueInfoProto{valueInfo("y", tensorType(onnxpb.TensorProto_FLOAT, "batch", 2))},
		},
	}
}

func marshal(t testing.TB, m *onnxpb.ModelProto) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeModel writes data as model.onnx in a fresh folder and returns its path.
func writeModel(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTinyModel(t *testing.T) {
	m, err := Load(writeModel(t, marshal(t, tinyModel())), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Graph.Initializers["w"]; w == nil || w.F[3] != 4 {
		t.Errorf("w = %+v", w)
	}
	if dimsString(m.Graph.Inputs[0].Dims) != "[batch,2]" {
		t.Errorf("dims %v", m.Graph.Inputs[0].Dims)
	}
}

// badCase is a model that Load must refuse with an error containing every want.
type badCase struct {
	name   string
	data   func(t *testing.T, dir string) []byte // bytes of model.onnx; may write files in dir
	want   []string
	sentry error // the sentinel the error must wrap (nil: any)
}

// mutate returns a badCase data function that edits tinyModel.
func mutate(f func(m *onnxpb.ModelProto)) func(*testing.T, string) []byte {
	return func(t *testing.T, _ string) []byte {
		m := tinyModel()
		f(m)
		return marshal(t, m)
	}
}

// external returns a badCase data function whose w lives in external data; setup
// prepares dir and returns the external_data entries.
func external(setup func(t *testing.T, dir string) map[string]string) func(*testing.T, string) []byte {
	return func(t *testing.T, dir string) []byte {
		m := tinyModel()
		w := m.Graph.Initializer[0]
		w.RawData = nil
		w.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
		entries := setup(t, dir)
		for _, k := range []string{"location", "offset", "length", "checksum"} {
			if v, ok := entries[k]; ok {
				w.ExternalData = append(w.ExternalData,
					&onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)})
			}
		}
		return marshal(t, m)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func constBytes(b []byte) func(*testing.T, string) []byte {
	return func(*testing.T, string) []byte { return b }
}

func badCases() []badCase {
	return []badCase{
		{"empty file", constBytes(nil), []string{"file is empty"}, ErrMalformed},
		{"random bytes", func(*testing.T, string) []byte {
			// Field 0 is invalid in protobuf: this never parses.
			b := make([]byte, 256)
			rand.New(rand.NewSource(1)).Read(b)
			b[0] = 0x07
			return b
		}, []string{"not an ONNX protobuf"}, ErrMalformed},
		{"truncated file", func(t *testing.T, _ string) []byte {
			b := marshal(t, tinyModel())
			return b[:len(b)-7]
		}, []string{"not an ONNX protobuf", "truncated"}, ErrMalformed},
		{"no graph", mutate(func(m *onnxpb.ModelProto) { m.Graph = nil }),
			[]string{"no graph"}, ErrMalformed},
		{"cycle", mutate(func(m *onnxpb.ModelProto) {
			// h = MatMul(x, y); y = Relu(h)
			m.Graph.Node[0].Input[1] = "y"
		}), []string{"cycle", `node "mm" (MatMul)`, `node "relu" (Relu)`}, ErrInvalidGraph},
		{"undefined input", mutate(func(m *onnxpb.ModelProto) { m.Graph.Node[1].Input[0] = "nope" }),
			[]string{`node "relu" (Relu)`, `input "nope" is not`}, ErrInvalidGraph},
		{"produced twice", mutate(func(m *onnxpb.ModelProto) { m.Graph.Node[1].Output[0] = "h" }),
			[]string{`value "h" is produced twice`, `node "mm" (MatMul)`, `node "relu" (Relu)`},
			ErrInvalidGraph},
		{"output shadows initializer", mutate(func(m *onnxpb.ModelProto) { m.Graph.Node[1].Output[0] = "w" }),
			[]string{`node "relu" (Relu) output "w" shadows initializer "w"`}, ErrInvalidGraph},
		{"output shadows input", mutate(func(m *onnxpb.ModelProto) { m.Graph.Node[0].Output[0] = "x" }),
			[]string{`node "mm" (MatMul) output "x" shadows graph input "x"`}, ErrInvalidGraph},
		{"graph output undefined", mutate(func(m *onnxpb.ModelProto) { m.Graph.Output[0].Name = proto.String("z") }),
			[]string{`graph output "z" is not produced`}, ErrInvalidGraph},
		{"opset newer", mutate(func(m *onnxpb.ModelProto) { m.OpsetImport[0].Version = proto.Int64(29) }),
			[]string{`opset 29 for domain "" is newer than supported (13..28)`}, ErrUnsupported},
		{"opset older", mutate(func(m *onnxpb.ModelProto) { m.OpsetImport[0].Version = proto.Int64(11) }),
			[]string{`opset 11 for domain "" is older than supported (13..28)`}, ErrUnsupported},
		{"ai.onnx opset newer", mutate(func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Domain = proto.String("ai.onnx")
			m.OpsetImport[0].Version = proto.Int64(30)
		}), []string{`opset 30 for domain "" is newer`}, ErrUnsupported},
		{"domain not imported", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].Domain = proto.String("com.example")
		}), []string{`node "relu" (com.example.Relu): domain "com.example" is not imported`}, ErrInvalidGraph},
		{"negative dims", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[0].Dims = []int64{-2, -2} }),
			[]string{`initializer "w"`, "negative dimension -2"}, ErrMalformed},
		{"negative input dim", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Input[0] = valueInfo("x", tensorType(onnxpb.TensorProto_FLOAT, -3, 2))
		}), []string{`graph input "x"`, "negative (-3)"}, ErrMalformed},
		{"overflowing dims", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].Dims = []int64{1 << 40, 1 << 40, 1 << 40}
		}), []string{`initializer "w"`, "more than"}, ErrMalformed},
		{"raw data short", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[0].RawData = f32Raw(1, 2, 3) }),
			[]string{`initializer "w"`, "raw_data holds 12 bytes", "needs 16"}, ErrMalformed},
		{"raw data long", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].RawData = f32Raw(1, 2, 3, 4, 5)
		}), []string{`initializer "w"`, "raw_data holds 20 bytes", "needs 16"}, ErrMalformed},
		{"terabyte initializer", mutate(func(m *onnxpb.ModelProto) {
			// 2^32 f64 elements: 32 GiB declared, 16 bytes present.
			w := m.Graph.Initializer[0]
			w.DataType = proto.Int32(int32(onnxpb.TensorProto_DOUBLE))
			w.Dims = []int64{1 << 16, 1 << 16}
		}), []string{`initializer "w"`, "raw_data holds 16 bytes", "needs 34359738368"}, ErrMalformed},
		{"terabyte typed initializer", mutate(func(m *onnxpb.ModelProto) {
			w := m.Graph.Initializer[0]
			w.RawData, w.FloatData = nil, []float32{1, 2}
			w.Dims = []int64{1 << 16, 1 << 16}
		}), []string{`initializer "w"`, "float_data holds 2 values"}, ErrMalformed},
		{"typed data in the wrong field", mutate(func(m *onnxpb.ModelProto) {
			w := m.Graph.Initializer[0]
			w.RawData, w.Int64Data = nil, []int64{1, 2, 3, 4}
		}), []string{`initializer "w"`, "must be in float_data"}, ErrMalformed},
		{"no data", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[0].RawData = nil }),
			[]string{`initializer "w"`, "has no data"}, ErrMalformed},
		{"unsupported dtype", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].DataType = proto.Int32(int32(onnxpb.TensorProto_COMPLEX64))
		}), []string{`initializer "w"`, "dtype COMPLEX64 (14)"}, ErrUnsupported},
		{"unsupported input dtype", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Input[0] = valueInfo("x", tensorType(onnxpb.TensorProto_STRING, 2))
		}), []string{`graph input "x"`, "dtype STRING (8)"}, ErrUnsupported},
		{"unknown dtype number", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].DataType = proto.Int32(99)
		}), []string{`initializer "w"`, "dtype 99 (99)"}, ErrUnsupported},
		{"segmented tensor", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].Segment = &onnxpb.TensorProto_Segment{Begin: proto.Int64(0), End: proto.Int64(1)}
		}), []string{`initializer "w"`, "segmented"}, ErrUnsupported},
		{"bad tensor attribute", mutate(func(m *onnxpb.ModelProto) {
			m.Graph.Node = append(m.Graph.Node, &onnxpb.NodeProto{
				Name: proto.String("c"), OpType: proto.String("Constant"), Output: []string{"c0"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"),
					Type: onnxpb.AttributeProto_TENSOR.Enum(),
					T:    rawTensor("", onnxpb.TensorProto_FLOAT, []int64{1 << 20}, f32Raw(1))}},
			})
		}), []string{`node "c" (Constant): attribute "value"`, "raw_data holds 4 bytes"}, ErrMalformed},
		{"external absolute path", external(func(t *testing.T, dir string) map[string]string {
			abs := filepath.Join(t.TempDir(), "w.bin")
			writeFile(t, abs, f32Raw(1, 2, 3, 4))
			return map[string]string{"location": abs}
		}), []string{`initializer "w"`, "is an absolute path"}, ErrUnsafePath},
		{"external dotdot", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(filepath.Dir(dir), "w.bin"), f32Raw(1, 2, 3, 4))
			return map[string]string{"location": "../w.bin"}
		}), []string{`initializer "w"`, `"../w.bin"`, `climbs out`}, ErrUnsafePath},
		{"external dotdot inside", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4))
			return map[string]string{"location": "sub/../w.bin"}
		}), []string{`climbs out`}, ErrUnsafePath},
		{"external symlink file", external(func(t *testing.T, dir string) map[string]string {
			target := filepath.Join(t.TempDir(), "secret.bin")
			writeFile(t, target, f32Raw(1, 2, 3, 4))
			if err := os.Symlink(target, filepath.Join(dir, "w.bin")); err != nil {
				t.Skip(err)
			}
			return map[string]string{"location": "w.bin"}
		}), []string{`initializer "w"`, `goes through "w.bin", a symbolic link`}, ErrUnsafePath},
		{"external symlink inside folder", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "real.bin"), f32Raw(1, 2, 3, 4))
			if err := os.Symlink("real.bin", filepath.Join(dir, "w.bin")); err != nil {
				t.Skip(err)
			}
			return map[string]string{"location": "w.bin"}
		}), []string{`goes through "w.bin", a symbolic link`}, ErrUnsafePath},
		{"external symlink dir", external(func(t *testing.T, dir string) map[string]string {
			other := t.TempDir()
			writeFile(t, filepath.Join(other, "w.bin"), f32Raw(1, 2, 3, 4))
			if err := os.Symlink(other, filepath.Join(dir, "data")); err != nil {
				t.Skip(err)
			}
			return map[string]string{"location": "data/w.bin"}
		}), []string{`goes through "data", a symbolic link`}, ErrUnsafePath},
		{"external offset past EOF", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4))
			return map[string]string{"location": "w.bin", "offset": "8", "length": "16"}
		}), []string{`initializer "w"`, "offset 8 + length 16 runs past the end", "(16 bytes)"}, ErrMalformed},
		{"external huge offset", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4))
			return map[string]string{"location": "w.bin", "offset": "9223372036854775807"}
		}), []string{"runs past the end"}, ErrMalformed},
		{"external length past EOF", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3))
			return map[string]string{"location": "w.bin"}
		}), []string{"offset 0 + length 16 runs past the end", "(12 bytes)"}, ErrMalformed},
		{"external length mismatch", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4, 5))
			return map[string]string{"location": "w.bin", "length": "20"}
		}), []string{"external data length 20", "need 16 bytes"}, ErrMalformed},
		{"external bad offset", external(func(t *testing.T, dir string) map[string]string {
			return map[string]string{"location": "w.bin", "offset": "-4"}
		}), []string{`offset "-4" is not a non-negative integer`}, ErrMalformed},
		{"external missing file", external(func(t *testing.T, dir string) map[string]string {
			return map[string]string{"location": "missing.bin"}
		}), []string{`external data "missing.bin"`, "no such file"}, nil},
		{"external directory", external(func(t *testing.T, dir string) map[string]string {
			if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			return map[string]string{"location": "d"}
		}), []string{`external data "d"`, "not a regular file"}, ErrUnsafePath},
		{"external terabytes", func(t *testing.T, dir string) []byte {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4))
			m := tinyModel()
			w := m.Graph.Initializer[0]
			w.RawData, w.Dims = nil, []int64{1 << 16, 1 << 16}
			w.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
			w.ExternalData = []*onnxpb.StringStringEntryProto{
				{Key: proto.String("location"), Value: proto.String("w.bin")}}
			return marshal(t, m)
		}, []string{`initializer "w"`, "length 17179869184 runs past the end", "(16 bytes)"}, ErrMalformed},
		{"external length entry mismatch", external(func(t *testing.T, dir string) map[string]string {
			writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4))
			return map[string]string{"location": "w.bin", "length": "17179869184"}
		}), []string{"external data length 17179869184"}, ErrMalformed},
	}
}

func TestBadInputs(t *testing.T) {
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "model.onnx")
			writeFile(t, path, tc.data(t, dir))
			m, err := Load(path, LoadOptions{})
			if err == nil {
				t.Fatalf("Load succeeded (%d nodes), want an error", len(m.Graph.Nodes))
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error does not name the file %s: %s", path, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q: %s", w, msg)
				}
			}
			if tc.sentry != nil && !errors.Is(err, tc.sentry) {
				t.Errorf("error does not wrap %v: %s", tc.sentry, msg)
			}
		})
	}
}

func TestFileTooLarge(t *testing.T) {
	path := writeModel(t, marshal(t, tinyModel()))
	_, err := Load(path, LoadOptions{MaxFileBytes: 10})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), path) {
		t.Errorf("got %v", err)
	}
	if _, err := Load(filepath.Dir(path), LoadOptions{}); err == nil {
		t.Error("loading a folder succeeded")
	}
}

func TestExternalDataLimit(t *testing.T) {
	dir := t.TempDir()
	data := external(func(t *testing.T, dir string) map[string]string {
		writeFile(t, filepath.Join(dir, "w.bin"), f32Raw(1, 2, 3, 4))
		return map[string]string{"location": "w.bin"}
	})(t, dir)
	path := filepath.Join(dir, "model.onnx")
	writeFile(t, path, data)
	if _, err := Load(path, LoadOptions{}); err != nil {
		t.Fatalf("valid external data: %v", err)
	}
	if _, err := Load(path, LoadOptions{MaxExternalBytes: 8}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("limit of 8 bytes: %v", err)
	}
}
