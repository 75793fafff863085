package interp

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestHostPeak: the estimate follows the run's liveness (a value dies after its
// last reader, one nobody reads at once), at 8 bytes an element, and names the
// node where the peak falls; a type past any host is counted, and sums saturate.
func TestHostPeak(t *testing.T) {
	f, err := ir.Parse(`func @f(
    %0: f32[1000] input "x",
) {
  %1 = exp(%0) : f32[1000] loc("a")
  %2 = exp(%1) : f32[1000] loc("b")
  %3 = neg(%2) : f32[1000] loc("dead")
  %4 = add(%1, %2) : f32[1000] loc("sum")
  %5 = neg(%4) : f32[1000] loc("out")
  return %5 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	// At "dead": x, a, b and dead itself; at "sum": x, a, b and sum.
	peak, at := HostPeak(f)
	if peak != 4*8000 || at == nil || at.Name != "dead" {
		t.Errorf("HostPeak = %d at %v, want 32000 at dead", peak, at)
	}
	// The run agrees: it holds no more than the estimate (Go's heap, roughly).
	x := tensor.New(tensor.F32, 1000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Run(f, map[string]*tensor.Tensor{"x": x}, Options{}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := int64(after.TotalAlloc - before.TotalAlloc); alloc < 5*8000 {
		t.Errorf("the run allocated %d bytes, less than its five results: does a tensor take 8 bytes an element?", alloc)
	}

	huge := ir.NewBuilder("huge")
	v := huge.Input("x", ir.T(tensor.F32, 1<<40, 1<<14))
	huge.Output("y", huge.Add(huge.Unary(ir.OpExp, v), v))
	g, err := huge.Build()
	if err != nil {
		t.Fatal(err)
	}
	// Past tensor.MaxElements a value is still counted (the budget's message gives
	// its size); sums saturate rather than wrap.
	if peak, _ := HostPeak(g); peak != 3<<57 {
		t.Errorf("HostPeak of three 2^54-element values = %d, want 3·2^57", peak)
	}
	if s := addSat(math.MaxInt64-1, 5); s != math.MaxInt64 {
		t.Errorf("addSat wrapped to %d", s)
	}
}

// TestResultPastMaxElements: a node whose result no host tensor can hold is an
// error naming it, before its kernel allocates (tensor.New would panic).
func TestResultPastMaxElements(t *testing.T) {
	b := ir.NewBuilder("big")
	b.SetName("wide")
	b.Output("y", b.Full(ir.T(tensor.F32, 1<<33), 1))
	f, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(f, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), `"wide"`) || !strings.Contains(err.Error(), "too large for host memory") {
		t.Errorf("Run: %v", err)
	}
}
