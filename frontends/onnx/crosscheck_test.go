package onnx

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	onnxgo "github.com/owulveryck/onnx-go"
	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"

	// Must come before onnx-go initializes; see its doc.
	_ "github.com/lcc-dev/lcc/frontends/onnx/internal/protoconflict"
)

// recorder is an onnx-go Backend that records, for each operation onnx-go applies,
// the op type and the input names of its first output (onnx-go adds one weighted
// edge per input, weight = input position). It keeps every edge, even repeated
// ones, which a gonum graph would merge.
type recorder struct {
	g     *simple.WeightedDirectedGraph
	edges []graph.WeightedEdge
	ops   []recordedOp
}

type recordedOp struct {
	opType string
	inputs []string
}

type namedNode struct {
	id   int64
	name string
}

func (n *namedNode) ID() int64           { return n.id }
func (n *namedNode) SetName(name string) { n.name = name }
func (n *namedNode) GetName() string     { return n.name }

func newRecorder() *recorder { return &recorder{g: simple.NewWeightedDirectedGraph(0, 0)} }

func (r *recorder) Node(id int64) graph.Node             { return r.g.Node(id) }
func (r *recorder) Nodes() graph.Nodes                   { return r.g.Nodes() }
func (r *recorder) From(id int64) graph.Nodes            { return r.g.From(id) }
func (r *recorder) To(id int64) graph.Nodes              { return r.g.To(id) }
func (r *recorder) HasEdgeBetween(x, y int64) bool       { return r.g.HasEdgeBetween(x, y) }
func (r *recorder) HasEdgeFromTo(u, v int64) bool        { return r.g.HasEdgeFromTo(u, v) }
func (r *recorder) Edge(u, v int64) graph.Edge           { return r.g.Edge(u, v) }
func (r *recorder) AddNode(n graph.Node)                 { r.g.AddNode(n) }
func (r *recorder) NewNode() graph.Node                  { return &namedNode{id: r.g.NewNode().ID()} }
func (r *recorder) SetWeightedEdge(e graph.WeightedEdge) { r.edges = append(r.edges, e) }
func (r *recorder) NewWeightedEdge(from, to graph.Node, w float64) graph.WeightedEdge {
	return simple.WeightedEdge{F: from, T: to, W: w}
}

func (r *recorder) ApplyOperation(op onnxgo.Operation, outs ...graph.Node) error {
	rec := recordedOp{opType: op.Name}
	if len(outs) > 0 {
		var mine []graph.WeightedEdge
		for _, e := range r.edges {
			if e.From().ID() == outs[0].ID() {
				mine = append(mine, e)
			}
		}
		sort.SliceStable(mine, func(i, j int) bool { return mine[i].Weight() < mine[j].Weight() })
		for _, e := range mine {
			rec.inputs = append(rec.inputs, e.To().(*namedNode).name)
		}
	}
	r.edges = r.edges[:0]
	r.ops = append(r.ops, rec)
	return nil
}

// TestCrossCheckOnnxGo reads every test model with onnx-go, an independent ONNX
// reader with its own generated protobuf code, and checks that both readings
// agree on node count, op types and input edges.
func TestCrossCheckOnnxGo(t *testing.T) {
	for _, path := range testModels(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ours, err := Load(path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			if err := onnxgo.NewModel(rec).UnmarshalBinary(data); err != nil {
				t.Fatalf("onnx-go: %v", err)
			}
			if len(rec.ops) != len(ours.Graph.Nodes) {
				t.Fatalf("onnx-go sees %d nodes, we see %d", len(rec.ops), len(ours.Graph.Nodes))
			}
			// The exporter writes nodes in topological order, so our stable sort keeps
			// the file order that onnx-go walks.
			edges := 0
			for i, n := range ours.Graph.Nodes {
				edges += len(rec.ops[i].inputs)
				theirs := rec.ops[i]
				want := n.Inputs
				if len(want) == 0 { // onnx-go invents an input for input-less nodes
					want = []string{n.Name + "/input"}
				}
				if theirs.opType != n.OpType || (len(n.Outputs) > 0 && !slices.Equal(theirs.inputs, want)) {
					t.Errorf("node %d: onnx-go %s%q, we %v%q", i, theirs.opType, theirs.inputs, &n, want)
				}
			}
			if edges == 0 {
				t.Error("onnx-go reported no input edges at all")
			}
		})
	}
}
