package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
)

// FuzzDecode feeds arbitrary bytes to Decode, which must return a model or an
// error and never panic. External data resolves against testdata/onnx, so the
// fuzzer also exercises the location checks (it can only read files there).
// Crashers found are kept under testdata/fuzz/FuzzDecode, where go test runs them
// as seeds from then on.
//
// The seeds are small (a few hundred bytes): windows of a few consecutive nodes of
// every test model (see seedWindows) and the tiny model. Go's fuzzing engine
// minimizes every new interesting input byte by byte, which for the test models'
// kilobytes (or megabytes, with weights) takes the whole run and reads as "0
// execs/sec" (golang/go#51484); on small seeds a 10 s run executes tens of
// thousands of inputs:
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=10s ./frontends/onnx/
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, testdataDir, LoadOptions{Source: "fuzz.onnx"})
		if err != nil {
			return
		}
		// A model that decodes must satisfy the package invariants.
		checkTopological(t, m)
		_ = m.OpsUsed()
	})
}

// addSeeds adds the test models' node windows and the tiny model as fuzz seeds.
func addSeeds(f *testing.F) {
	for _, seed := range seedCorpus(f) {
		f.Add(seed)
	}
}

// seedCorpus is every fuzz seed: node windows of each test model (testdata/onnx and
// the Hugging Face exports in testdata/hf) and the tiny model.
func seedCorpus(t testing.TB) [][]byte {
	var seeds [][]byte
	hf, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "hf", "*.onnx"))
	for _, path := range append(testModels(t), hf...) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, seedWindows(t, data)...)
	}
	return append(seeds, marshal(t, tinyModel()))
}

// Window seeds: how many nodes each holds, and at most how many per model.
const (
	windowNodes   = 5
	windowsPerMod = 8
)

// seedWindows cuts a model into small valid models, each a window of windowNodes
// consecutive nodes: a value the window reads but does not compute becomes a graph
// input typed as the model types it (so does an initializer of more than 16
// elements, which keeps the seed small without breaking the shapes), small
// initializers (shape constants, scalars) stay, external ones keep pointing into
// testdata/onnx, and the last node's outputs are the graph outputs. Windows whose
// values the model leaves untyped are skipped.
func seedWindows(t testing.TB, data []byte) [][]byte {
	t.Helper()
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	g := m.GetGraph()
	types := map[string]*onnxpb.TypeProto{}
	for _, vs := range [][]*onnxpb.ValueInfoProto{g.GetInput(), g.GetOutput(), g.GetValueInfo()} {
		for _, v := range vs {
			types[v.GetName()] = v.GetType()
		}
	}
	inits := map[string]*onnxpb.TensorProto{}
	for _, tp := range g.GetInitializer() {
		inits[tp.GetName()] = tp
	}
	funcs := map[string]*onnxpb.FunctionProto{}
	for _, fn := range m.GetFunctions() {
		funcs[fn.GetName()] = fn
	}
	nodes := g.GetNode()
	n := len(nodes) / windowNodes
	step := max(1, n/windowsPerMod)
	var seeds [][]byte
	for w := 0; w < n && len(seeds) < windowsPerMod; w += step {
		win := nodes[w*windowNodes : (w+1)*windowNodes]
		if seed, ok := windowModel(&m, win, types, inits, funcs); ok {
			seeds = append(seeds, marshal(t, seed))
		}
	}
	return seeds
}

// windowModel builds the model of one window, or reports that a value it needs
// has no type.
func windowModel(m *onnxpb.ModelProto, win []*onnxpb.NodeProto, types map[string]*onnxpb.TypeProto,
	inits map[string]*onnxpb.TensorProto, funcs map[string]*onnxpb.FunctionProto) (*onnxpb.ModelProto, bool) {
	g := &onnxpb.GraphProto{Name: proto.String("window")}
	made, seen := map[string]bool{}, map[string]bool{}
	for _, nd := range win {
		c := proto.Clone(nd).(*onnxpb.NodeProto)
		c.DocString, c.MetadataProps = nil, nil
		for _, in := range c.GetInput() {
			if in == "" || made[in] || seen[in] {
				continue
			}
			seen[in] = true
			tp, isInit := inits[in]
			small := isInit && (tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || numel(tp.GetDims()) <= 16)
			switch {
			case small:
				ct := proto.Clone(tp).(*onnxpb.TensorProto)
				ct.DocString, ct.MetadataProps = nil, nil
				g.Initializer = append(g.Initializer, ct)
			case isInit:
				typ := &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
					ElemType: proto.Int32(tp.GetDataType()), Shape: &onnxpb.TensorShapeProto{}}}}
				for _, d := range tp.GetDims() {
					typ.GetTensorType().Shape.Dim = append(typ.GetTensorType().Shape.Dim,
						&onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
				}
				g.Input = append(g.Input, &onnxpb.ValueInfoProto{Name: proto.String(in), Type: typ})
			default:
				typ, ok := types[in]
				if !ok {
					return nil, false
				}
				g.Input = append(g.Input, &onnxpb.ValueInfoProto{Name: proto.String(in), Type: typ})
			}
		}
		for _, out := range c.GetOutput() {
			made[out] = true
		}
		g.Node = append(g.Node, c)
	}
	for _, out := range win[len(win)-1].GetOutput() {
		typ, ok := types[out]
		if out == "" || !ok {
			return nil, false
		}
		g.Output = append(g.Output, &onnxpb.ValueInfoProto{Name: proto.String(out), Type: typ})
	}
	seed := &onnxpb.ModelProto{IrVersion: m.IrVersion, OpsetImport: m.GetOpsetImport(), Graph: g}
	for _, nd := range win {
		if fn, ok := funcs[nd.GetOpType()]; ok && nd.GetDomain() == fn.GetDomain() {
			seed.Functions = append(seed.Functions, fn)
		}
	}
	return seed, true
}

func numel(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// The fuzz seeds stay small and valid: a short fuzz run then spends its time on
// mutated inputs, not on minimizing large ones.
func TestFuzzSeedsSmall(t *testing.T) {
	seeds := seedCorpus(t)
	if len(seeds) < 30 {
		t.Errorf("%d seeds; the node windows should give more", len(seeds))
	}
	for i, s := range seeds {
		if len(s) > 1024 {
			t.Errorf("seed %d is %d bytes; keep seeds under 1 KiB", i, len(s))
		}
		if _, err := Decode(s, testdataDir, LoadOptions{Source: "seed.onnx"}); err != nil {
			t.Errorf("seed %d does not decode: %v", i, err)
		}
	}
}
