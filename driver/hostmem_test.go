package driver

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// TestHostBudgetFit: a function whose host peak passes the budget is refused
// with both figures, the budget's source and the node where the peak falls; one
// that fits, and any function under the zero budget, pass.
func TestHostBudgetFit(t *testing.T) {
	f, err := ir.Parse(`func @f(
    %0: f32[1024,1024] input "x",
) {
  %1 = exp(%0) : f32[1024,1024] loc("e")
  return %1 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	const peak = 2 * 8 << 20 // x and e, 8 bytes an element
	b := HostBudget{Bytes: 8 << 20, Source: "--host-memory-budget"}
	err = b.Fit(f, 0)
	for _, want := range []string{"16777216 bytes (16.00 MiB)", "more than the 8388608 bytes", `exp "e"`,
		"(--host-memory-budget)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Fit under 8 MiB: %v; want %q", err, want)
		}
	}
	if err := (HostBudget{Bytes: peak, Source: "test"}).Fit(f, 0); err != nil {
		t.Errorf("Fit at its peak: %v", err)
	}
	if err := (HostBudget{Bytes: peak, Source: "test"}).Fit(f, 1); err == nil ||
		!strings.Contains(err.Error(), "held beside it") {
		t.Errorf("Fit with a byte held beside: %v", err)
	}
	if err := (HostBudget{}).Fit(f, 1<<62); err != nil {
		t.Errorf("the zero budget refused: %v", err)
	}
	if b := NewHostBudget(1 << 30); b.Bytes != 1<<30 || b.Source != "--host-memory-budget" {
		t.Errorf("NewHostBudget(1GiB) = %+v", b)
	}
	if b := NewHostBudget(1 << 30).Share(4); b.Bytes != 1<<28 || !strings.Contains(b.Source, "shared by 4 ranks") {
		t.Errorf("a 1 GiB budget shared by 4 ranks = %+v", b)
	}
}
