package onnx

import (
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
)

// FuzzDecode feeds arbitrary bytes to Decode, which must return a model or an
// error and never panic. External data resolves against testdata/onnx, so the
// fuzzer also exercises the location checks (it can only read files there).
// Crashers found are kept under testdata/fuzz.
//
// The seeds are the test models with their inline initializers shrunk to one
// element and their doc strings, metadata and value_info dropped: megabytes of
// weights and exporter stack traces add no structure, and Go's fuzzing engine
// minimizes every new interesting input byte by byte, which for a megabyte seed
// takes minutes and reads as "0 execs/sec" (golang/go#51484). Even so, a short
// run fuzzes far more with a cap on minimization:
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=60s -fuzzminimizetime=3s ./frontends/onnx/
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

// addSeeds adds the shrunk test models and the tiny model as fuzz seeds.
func addSeeds(f *testing.F) {
	for _, path := range testModels(f) {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(shrinkSeed(f, data))
	}
	f.Add(marshal(f, tinyModel()))
}

// shrinkSeed turns every inline initializer of a model into a scalar of the same
// dtype (external ones are kept: they point into testdata/onnx) and drops what
// the decoder does not validate.
func shrinkSeed(t testing.TB, data []byte) []byte {
	t.Helper()
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m.DocString, m.MetadataProps = nil, nil
	g := m.GetGraph()
	g.DocString, g.ValueInfo, g.MetadataProps = nil, nil, nil
	for _, n := range g.GetNode() {
		n.DocString, n.MetadataProps = nil, nil
	}
	for _, tp := range g.GetInitializer() {
		tp.DocString, tp.MetadataProps = nil, nil
		if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
			continue
		}
		dt, ok := DType(tp.GetDataType())
		if !ok {
			t.Fatalf("initializer %q: dtype %d", tp.GetName(), tp.GetDataType())
		}
		tp.Dims = nil
		tp.RawData = make([]byte, dt.Size())
		tp.FloatData, tp.Int32Data, tp.Int64Data, tp.DoubleData = nil, nil, nil, nil
	}
	return marshal(t, &m)
}
