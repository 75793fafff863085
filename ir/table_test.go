package ir

import (
	"reflect"
	"testing"
)

// TestDefaultsTable checks the Defaults column: every default names an attribute
// its op declares, has that attribute's kind, and is not the kind's zero value
// (which needs no entry); and the ops known to have non-zero defaults have them.
func TestDefaultsTable(t *testing.T) {
	for _, op := range AllOps() {
		info := op.Info()
		for _, d := range info.Defaults {
			var spec *AttrSpec
			for i := range info.Attrs {
				if info.Attrs[i].Name == d.Name {
					spec = &info.Attrs[i]
				}
			}
			if spec == nil {
				t.Errorf("%s: default for undeclared attribute %s", op, d.Name)
				continue
			}
			if k, err := kindOf(d.Value); err != nil || k != spec.Kind {
				t.Errorf("%s: default %s=%v is %v, declared %v (%v)", op, d.Name, d.Value, k, spec.Kind, err)
			}
			if reflect.ValueOf(d.Value).IsZero() {
				t.Errorf("%s: default %s=%v is the zero value; leave it out", op, d.Name, d.Value)
			}
		}
	}
	for _, c := range []struct {
		op   Op
		name string
		want any
	}{
		{OpSoftmax, "axis", int64(-1)}, {OpLogSoftmax, "axis", int64(-1)},
		{OpLayerNorm, "axis", int64(-1)}, {OpLayerNorm, "eps", 1e-5}, {OpRMSNorm, "eps", 1e-5},
		{OpGather, "axis", int64(0)}, {OpConcat, "axis", int64(0)},
		{OpSoftmaxCrossEntropy, "reduction", "mean"}, {OpNLLLoss, "reduction", "mean"},
		{OpFusedLinearCrossEntropy, "reduction", "mean"},
		{OpFusedLinearCrossEntropyGrad, "reduction", "mean"},
		{OpDilatedAttention, "offsets", OffsetsPaper}, {OpShardedDilatedAttention, "offsets", OffsetsPaper},
		{OpRingAttention, "layout", LayoutZigzag}, {OpShardPositions, "layout", LayoutContiguous},
		{OpShardPositions, "inner", int64(1)}, {OpAllReduce, "op", "sum"}, {OpRingShift, "shift", int64(1)},
		{OpRange, "delta", 1.0}, {OpFull, "value", 0.0},
	} {
		n := &Node{Op: c.op}
		var got any
		switch c.want.(type) {
		case int64:
			got = n.AttrInt(c.name)
		case float64:
			got = n.AttrFloat(c.name)
		case string:
			got = n.AttrString(c.name)
		}
		if got != c.want {
			t.Errorf("%s %s defaults to %v, want %v", c.op, c.name, got, c.want)
		}
		// A value present wins over the default.
		n.Attrs = A(c.name, c.want)
		if v, _ := n.Attrs.Get(c.name); v != c.want {
			t.Errorf("%s %s: A() stored %v", c.op, c.name, v)
		}
	}
}

// Reading an attribute an op does not declare, or as another kind, is a bug.
func TestAttrReadPanics(t *testing.T) {
	for name, read := range map[string]func(){
		"undeclared": func() { (&Node{Op: OpMatMul}).AttrInt("axis") },
		"wrong kind": func() { (&Node{Op: OpSoftmax}).AttrFloat("axis") },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			read()
		}()
	}
}

// Every VJP rule belongs to an op with a row that is not marked NoGrad, and def
// installed it (TestGradTable in grad_test.go checks the other direction).
func TestGradRulesInstalled(t *testing.T) {
	for op, rule := range gradRules {
		info := op.Info()
		if info.Name == "" || info.NoGrad {
			t.Errorf("VJP rule for op %v, which has no row or is NoGrad", op)
		}
		if reflect.ValueOf(info.Grad).Pointer() != reflect.ValueOf(rule).Pointer() {
			t.Errorf("op %s: the row's Grad is not its gradRules entry", op)
		}
	}
}

// TestFLOPsTable: every op has a FLOPs rule (flops.go), and the rules give the
// documented counts on small nodes.
func TestFLOPsTable(t *testing.T) {
	for _, op := range AllOps() {
		if op.Info().FLOPs == nil {
			t.Errorf("op %s has no FLOPs rule in flopRules", op)
		}
	}
	for op := range flopRules {
		if op.Info().Name == "" {
			t.Errorf("FLOPs rule for op %v, which has no row", op)
		}
	}
	f, err := Parse(`func @f(
    %0: f32[2,3,4] input "a",
    %1: f32[4,5] weight "w",
    %2: f32[1,8,2,4] input "q",
) {
  %3 = matmul(%0, %1) : f32[2,3,5]
  %4 = exp(%3) : f32[2,3,5]
  %5 = reduce_sum(%4) {axes=[2]} : f32[2,3]
  %6 = reshape(%4) {shape=[6,5]} : f32[6,5]
  %7 = softmax(%6) : f32[6,5]
  %8, %9 = attention(%2, %2, %2) {causal, scale=0.5} : f32[1,8,2,4], f32[1,2,8]
  return %5 "s", %7 "p", %8 "o"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	// matmul 2·6·4·5; exp 30; reduce reads 30 and writes 6; reshape 0; softmax 5·30;
	// causal attention 4·B·H·T·S·D / 2 = 4·1·2·8·8·4 / 2.
	want := []int64{240, 30, 36, 0, 150, 1024}
	for i, n := range f.Body {
		if got := n.FLOPs(); got != want[i] {
			t.Errorf("%s: %d FLOPs, want %d", n.Op, got, want[i])
		}
	}
}

// TestCommTable: every op with a ranks attribute (a collective or a sharded
// attention) has a communication rule, and only those ops have one.
func TestCommTable(t *testing.T) {
	for _, op := range AllOps() {
		ranked := false
		for _, a := range op.Info().Attrs {
			ranked = ranked || a.Name == "ranks"
		}
		if _, ok := commRules[op]; ok != ranked {
			t.Errorf("op %s: ranks attribute %v, communication rule %v", op, ranked, ok)
		}
	}
}
