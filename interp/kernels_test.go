package interp

import (
	"testing"

	"github.com/lcc-dev/lcc/ir"
)

// TestEveryOpHasKernel is the table test: a missing kernel is a loud bug.
func TestEveryOpHasKernel(t *testing.T) {
	for _, op := range ir.AllOps() {
		if !HasKernel(op) {
			t.Errorf("op %v has no CPU kernel", op)
		}
	}
}
