package cuda

import (
	"testing"

	"github.com/lcc-dev/lcc/cost"
)

// TestWorkspaceIsPlanned: the memory model's fixed cost for cuBLASLt is the
// workspace NewBlasLt allocates.
func TestWorkspaceIsPlanned(t *testing.T) {
	if DefaultWorkspace != cost.CuBLASLtWorkspaceBytes {
		t.Errorf("cuBLASLt workspace %d, planned %d", DefaultWorkspace, cost.CuBLASLtWorkspaceBytes)
	}
}
