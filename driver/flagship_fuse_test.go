package driver_test

import (
	"testing"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/targets"
)

// TestFlagshipFuseLaunches compiles the 221M flagship's bf16 step at T=4096
// (the profile's, no GPU needed) with and without --fuse and logs the kernel
// launches and arena; fusion may not add either.
func TestFlagshipFuseLaunches(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the 221M flagship twice")
	}
	tg, err := targets.Lookup("h200x1")
	if err != nil {
		t.Fatal(err)
	}
	var launch [2]int
	var arena [2]int64
	for i, fuse := range []string{"off", "on"} {
		f, err := llamagen.Build(llamagen.Flagship(4096))
		if err != nil {
			t.Fatal(err)
		}
		res, err := driver.Compile(f, driver.CompileOptions{Target: tg, Options: driver.Options{
			Loss: "cross-entropy", Precision: "bf16", Fuse: fuse}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Program == nil {
			t.Fatalf("no program: %s", res.Report.KernelError)
		}
		launch[i] = launches(res.Program)
		_, arena[i] = cudagen.PlanArena(res.Program.Plan)
		if fu := res.Report.Fusion; fu != nil {
			t.Logf("fuse: %d groups, nodes %d → %d", len(fu.Groups), fu.NodesBefore, fu.NodesAfter)
		}
	}
	t.Logf("flagship T=4096 bf16: kernel launches %d → %d, arena %d → %d bytes", launch[0], launch[1],
		arena[0], arena[1])
	if launch[1] > launch[0] || arena[1] > arena[0] {
		t.Errorf("fusion added launches or arena")
	}
}
