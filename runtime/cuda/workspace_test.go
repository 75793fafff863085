package cuda

import (
	"testing"

	"github.com/lcc-dev/lcc/plan"
)

// TestWorkspaceIsPlanned: the memory model's fixed cost for cuBLASLt is the
// workspace NewBlasLt allocates.
func TestWorkspaceIsPlanned(t *testing.T) {
	if DefaultWorkspace != plan.CuBLASLtWorkspaceBytes {
		t.Errorf("cuBLASLt workspace %d, planned %d", DefaultWorkspace, plan.CuBLASLtWorkspaceBytes)
	}
}
