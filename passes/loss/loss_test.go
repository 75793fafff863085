package loss

import (
	"math"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// lm is a tiny language model: tokens embedded by a 10-row table, logits over
// those 10 words, and a hidden state output that is not logits.
const lm = `func @lm(
    %0: i64[batch=2,seq=3] input "ids",
    %1: f32[10,4] weight "emb",
    %2: f32[4,10] weight "head",
) {
  %3 = gather(%1, %0) {axis=0} : f32[2,3,4]
  %4 = matmul(%3, %2) : f32[2,3,10]
  return %4 "logits", %3 "hidden"
}
`

func parse(t *testing.T, src string) *ir.Func {
	t.Helper()
	f, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// withOutputs returns lm with extra scalar outputs (sums of the logits).
func withOutputs(t *testing.T, names ...string) *ir.Func {
	f := parse(t, lm)
	b := ir.Edit(f)
	for _, n := range names {
		b.Output(n, b.Apply1(ir.OpReduceSum, ir.A("axes", []int64{0, 1, 2}), f.Output("logits")))
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLogitsAndVocab(t *testing.T) {
	f := parse(t, lm)
	if v, ok := Vocab(f); !ok || v != 10 {
		t.Errorf("Vocab = %d, %v; want 10 from the embedding", v, ok)
	}
	// hidden [2,3,4] is float, rank 3, last dim > 1: the vocabulary rules it out.
	o, err := Logits(f)
	if err != nil || o.Name != "logits" {
		t.Fatalf("Logits = %q, %v; want logits", o.Name, err)
	}
	// Without an embedding the vocabulary is unknown and both outputs qualify.
	g := parse(t, `func @f(%0: f32[2,3,4] input "x", %1: f32[4,10] weight "w") {
  %2 = matmul(%0, %1) : f32[2,3,10]
  return %2 "a", %0 "b"
}
`)
	if _, err := Logits(g); err == nil || !strings.Contains(err.Error(), "2 outputs that could be logits (a, b)") {
		t.Errorf("two candidates: %v", err)
	}
	// Exporters view input_ids before the embedding; a position table is gathered
	// by constants, not by a parameter.
	v := parse(t, `func @f(%0: i64[1,3] input "ids", %1: f32[10,4] weight "emb", %2: f32[8,4] weight "pos") {
  %3 = constant() {value=i64[1,3]{0, 1, 2}} : i64[1,3]
  %4 = gather(%2, %3) {axis=0} : f32[1,3,4]
  %5 = reshape(%0) {shape=[1,3]} : i64[1,3]
  %6 = gather(%1, %5) {axis=0} : f32[1,3,4]
  %7 = add(%4, %6) : f32[1,3,4]
  %8 = matmul(%7, %1) {transpose_b} : f32[1,3,10]
  return %8 "y", %7 "h"
}
`)
	if n, ok := Vocab(v); !ok || n != 10 {
		t.Errorf("Vocab through a reshape = %d, %v; want 10", n, ok)
	}
	if o, err := Logits(v); err != nil || o.Name != "y" {
		t.Errorf("Logits = %q, %v; want y", o.Name, err)
	}
	h := parse(t, `func @f(%0: f32[2,3] input "x") {
  %1 = neg(%0) : f32[2,3]
  %2 = reduce_sum(%1) {axes=[0,1]} : f32[]
  return %2 "s"
}
`)
	if _, err := Logits(h); err == nil || !strings.Contains(err.Error(), "no logits output") {
		t.Errorf("no candidate: %v", err)
	}
}

func TestModelLoss(t *testing.T) {
	for _, tc := range []struct {
		outs []string
		want string // the loss, or an error fragment after "!"
	}{
		{nil, "!no scalar float output"},
		{[]string{"total"}, "total"},                     // one scalar, whatever its name
		{[]string{"aux", "lm_loss"}, "lm_loss"},          // the one named like a loss
		{[]string{"aux", "z"}, "!no single one named"},   // ambiguous
		{[]string{"a_loss", "b_loss"}, "!no single one"}, // ambiguous too
	} {
		got, err := ModelLoss(withOutputs(t, tc.outs...))
		if strings.HasPrefix(tc.want, "!") {
			if err == nil || !strings.Contains(err.Error(), tc.want[1:]) {
				t.Errorf("%v: %q, %v; want error %q", tc.outs, got, err, tc.want[1:])
			}
		} else if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.outs, got, err, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	float := parse(t, `func @f(%0: f32[2,3,4] input "x", %1: f32[4,10] weight "w") {
  %2 = matmul(%0, %1) : f32[2,3,10]
  return %2 "y"
}
`)
	for _, tc := range []struct {
		name string
		f    *ir.Func
		kind string
		want Choice
		err  string
	}{
		{"lm auto", parse(t, lm), Auto, Choice{Kind: CrossEntropy, Loss: "loss", Logits: "logits"}, ""},
		{"lm default", parse(t, lm), "", Choice{Kind: CrossEntropy, Loss: "loss", Logits: "logits"}, ""},
		{"lm none", parse(t, lm), None, Choice{Kind: None, Logits: "logits"}, ""},
		{"lm model", parse(t, lm), Model, Choice{}, "--loss=model: func @lm has no scalar"},
		{"own loss auto", withOutputs(t, "my_loss"), Auto, Choice{Kind: Model, Loss: "my_loss", Logits: "logits"}, ""},
		{"own loss ce", withOutputs(t, "my_loss"), CrossEntropy,
			Choice{Kind: CrossEntropy, Loss: "loss", Logits: "logits"}, ""},
		{"ambiguous auto", withOutputs(t, "a", "b"), Auto, Choice{}, "pass --loss=cross-entropy"},
		{"taken name", withOutputs(t, "loss"), CrossEntropy, Choice{}, `already has an output named "loss"`},
		// No token embedding: auto does not guess that y holds logits.
		{"float auto", float, Auto, Choice{Kind: None, Logits: "y"}, ""},
		{"float ce", float, CrossEntropy, Choice{Kind: CrossEntropy, Loss: "loss", Logits: "y"}, ""},
		{"bad kind", parse(t, lm), "mse", Choice{}, `--loss "mse": want auto, cross-entropy, model, none`},
	} {
		got, err := Resolve(tc.f, tc.kind)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %+v, %v; want error %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// TestCrossEntropyNumbers applies cross-entropy and checks the loss against a
// direct computation from the logits, label −100 ignored, and that a training
// step keeps the loss output alone.
func TestCrossEntropyNumbers(t *testing.T) {
	f := parse(t, lm)
	ref := parse(t, lm)
	c, err := Apply(f, Auto, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Outputs) != 1 || f.Outputs[0].Name != Output {
		t.Fatalf("outputs %v, want the loss alone", f.Outputs)
	}
	if got := f.Param(Labels).Value.Type.String(); got != "i64[batch=2,seq=3]" {
		t.Errorf("labels %s, want i64[batch=2,seq=3]", got)
	}
	emb := tensor.New(tensor.F32, 10, 4)
	head := tensor.New(tensor.F32, 4, 10)
	for i := range emb.F {
		emb.F[i] = math.Sin(float64(i))
		head.F[i] = math.Cos(float64(3 * i))
	}
	ids := tensor.FromInts(tensor.I64, []int64{2, 3}, []int64{1, 2, 3, 4, 5, 9})
	labels := tensor.FromInts(tensor.I64, []int64{2, 3}, []int64{2, IgnoreIndex, 0, 9, 6, IgnoreIndex})
	in := map[string]*tensor.Tensor{"ids": ids, "emb": emb, "head": head}
	want, err := interp.Run(ref, in, interp.Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	in[Labels] = labels
	got, err := interp.Run(f, in, interp.Options{Precision: tensor.F64})
	if err != nil {
		t.Fatal(err)
	}
	logits := want[c.Logits]
	var sum float64
	n := 0
	for i, l := range labels.I {
		if l == IgnoreIndex {
			continue
		}
		row := logits.F[i*10 : (i+1)*10]
		var s float64
		for _, x := range row {
			s += math.Exp(x)
		}
		sum += math.Log(s) - row[l]
		n++
	}
	if g := got[Output].F[0]; math.Abs(g-sum/float64(n)) > 1e-6 {
		t.Errorf("loss %v, want %v", g, sum/float64(n))
	}
}

// TestExistingLabels reuses a label parameter the model declares, and refuses
// one that cannot label the logits.
func TestExistingLabels(t *testing.T) {
	src := strings.Replace(lm, `%2: f32[4,10] weight "head",`,
		`%2: f32[4,10] weight "head",
    %5: i64[6] label "labels",`, 1)
	f := parse(t, src)
	if _, err := Apply(f, CrossEntropy, true); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Params); n != 4 {
		t.Errorf("%d params, want the 4 declared (labels reused)", n)
	}
	if len(f.Outputs) != 3 {
		t.Errorf("keepOutputs: %d outputs, want logits, hidden and loss", len(f.Outputs))
	}
	bad := parse(t, strings.Replace(src, "i64[6]", "i64[5]", 1))
	if _, err := Apply(bad, CrossEntropy, false); err == nil || !strings.Contains(err.Error(), `"labels" is i64[5]`) {
		t.Errorf("misfit labels: %v", err)
	}
}
