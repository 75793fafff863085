package driver

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/interp/attention"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/tensor"
)

// docSep is the separator of the packed-documents tests: it ends every document.
const docSep = 0

// llamaStep loads llama_mini for [b, seq], runs the forward pipeline with att, packs
// documents when packed, and inserts the cross-entropy loss.
func llamaStep(t *testing.T, b, seq int64, att AttentionOptions, packed bool) *ir.Func {
	t.Helper()
	f, err := Load(filepath.Join(td, "onnx", "llama_mini.onnx"), Bindings{SeqLen: seq, Batch: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(f, att, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	ps := []passes.Pass{loss.Insert("", false, nil)}
	if packed {
		ps = append([]passes.Pass{passes.PackDocuments()}, ps...)
	}
	if _, err := passes.Run(f, ps, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	return f
}

// packedRows makes rows of documents of the given lengths: random tokens, each
// document ending with docSep, targets within documents only.
func packedRows(lens [][]int64, seq int64, seed uint64) (ids, labels, starts *tensor.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 3))
	b := int64(len(lens))
	ids, labels, starts = tensor.New(tensor.I64, b, seq), tensor.New(tensor.I64, b, seq),
		tensor.New(tensor.I64, b, seq)
	for r, row := range lens {
		at := int64(0)
		for _, n := range row {
			for i := range n {
				tok := int64(1 + rng.IntN(511))
				if i == n-1 {
					tok = docSep
				}
				ids.I[int64(r)*seq+at+i] = tok
			}
			at += n
		}
		row := ids.I[int64(r)*seq : int64(r+1)*seq]
		copy(starts.I[int64(r)*seq:], attention.DocStarts(row, docSep, 0))
		for i, tok := range row {
			l := int64(loss.IgnoreIndex)
			if tok != docSep && i+1 < len(row) {
				l = row[i+1]
			}
			labels.I[int64(r)*seq+int64(i)] = l
		}
	}
	return ids, labels, starts
}

// lossOf runs a step's forward in float64 and returns its loss.
func lossOf(t *testing.T, f *ir.Func, in map[string]*tensor.Tensor) float64 {
	t.Helper()
	outs, err := interp.Run(f, in, interp.Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	return outs[loss.Output].F[0]
}

// Issue 27's done-when: the loss of packed sequences is the token-weighted mean of
// each document's own loss, with positions reset, within 1e-6.
func TestPackedLossIsMeanOfDocuments(t *testing.T) {
	const seq = 16
	lens := [][]int64{{5, 7, 4}, {3, 13}}
	for _, c := range []struct {
		name string
		att  AttentionOptions
	}{
		{"dense", AttentionOptions{}},
		{"dilated", AttentionOptions{Mode: "dilated", Segments: []int64{2, 4, 8}, Dilations: []int64{1, 2, 4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ids, labels, starts := packedRows(lens, seq, 1)
			got := lossOf(t, llamaStep(t, 2, seq, c.att, true),
				map[string]*tensor.Tensor{"input_ids": ids, "labels": labels, passes.DocStartsInput: starts})
			want := docsMean(t, lens, seq, ids, labels, func(n int64, in map[string]*tensor.Tensor) float64 {
				return lossOf(t, llamaStep(t, 1, n, c.att, false), in)
			})
			// The control: without pack-documents the documents see each other.
			leaky := lossOf(t, llamaStep(t, 2, seq, c.att, false),
				map[string]*tensor.Tensor{"input_ids": ids, "labels": labels})
			if math.Abs(leaky-want) < 1e-3 {
				t.Fatalf("the unpacked model's loss %.12f is the documents' %.12f: the test sees nothing", leaky, want)
			}
			t.Logf("%s: packed %.12f, mean of documents %.12f", c.name, got, want)
			if math.Abs(got-want) > 1e-6 {
				t.Fatalf("packed loss %.12f, token-weighted mean of the documents' %.12f", got, want)
			}
		})
	}
}

// docsMean runs each document alone (alone(n, inputs) is its mean loss over its own
// targets) and returns the mean weighted by each document's number of targets.
func docsMean(t *testing.T, lens [][]int64, seq int64, ids, labels *tensor.Tensor,
	alone func(n int64, in map[string]*tensor.Tensor) float64) float64 {
	t.Helper()
	sum, count := 0.0, 0.0
	for r, row := range lens {
		at := int64(r) * seq
		for _, n := range row {
			di, dl := tensor.New(tensor.I64, 1, n), tensor.New(tensor.I64, 1, n)
			copy(di.I, ids.I[at:at+n])
			copy(dl.I, labels.I[at:at+n])
			targets := 0.0
			for _, l := range dl.I {
				if l != loss.IgnoreIndex {
					targets++
				}
			}
			if targets == 0 {
				panic(fmt.Sprintf("document of %d tokens without targets", n))
			}
			sum += targets * alone(n, map[string]*tensor.Tensor{"input_ids": di, "labels": dl})
			count += targets
			at += n
		}
	}
	return sum / count
}

// The same on 2 ranks of ring attention: doc starts are sharded with the tokens
// (zigzag), and each block's document mask comes from global positions.
func TestPackedLossRingTwoRanks(t *testing.T) {
	const seq = 16
	lens := [][]int64{{5, 7, 4}, {3, 13}}
	ids, labels, starts := packedRows(lens, seq, 2)
	f := llamaStep(t, 2, seq, AttentionOptions{}, true)
	sp, err := ShardObjective(f, Objective{Loss: loss.Output}, ShardOptions{Ranks: 2, Mode: "ring", Grads: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := countOp(sp.Func, ir.OpRingAttention); n == 0 {
		t.Fatal("no ring_attention in the sharded step")
	}
	feeds := map[string]*tensor.Tensor{"input_ids": ids, "labels": labels, passes.DocStartsInput: starts}
	outs, err := sp.Run(sp.ShardFeeds(feeds), 0, tensor.F64)
	if err != nil {
		t.Fatal(err)
	}
	got := sp.Gather(outs, loss.Output).F[0]
	want := docsMean(t, lens, seq, ids, labels, func(n int64, in map[string]*tensor.Tensor) float64 {
		return lossOf(t, llamaStep(t, 1, n, AttentionOptions{}, false), in)
	})
	t.Logf("ring N=2: packed %.12f, mean of documents %.12f", got, want)
	if math.Abs(got-want) > 1e-6 {
		t.Fatalf("packed loss on 2 ranks %.12f, token-weighted mean of the documents' %.12f", got, want)
	}
}
