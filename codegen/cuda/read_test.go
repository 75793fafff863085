package cuda

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/codegen/cuda/cudatest"
	"github.com/lcc-dev/lcc/tensor"
)

// TestReadProgramRoundTrip: what WriteKernels writes, ReadProgram reads back as
// the same program: the same kernels, the same launch plan (PlanJSON bytes), the
// same arena and the same constants, in both storages.
func TestReadProgramRoundTrip(t *testing.T) {
	f, _ := cudatest.Zoo(t, 1)
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		want, err := Build(f, Options{Arch: "sm_90a", Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := WriteKernels(dir, want.Kernels, want.Plan); err != nil {
			t.Fatal(err)
		}
		got, err := ReadProgram(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Kernels, want.Kernels) {
			t.Errorf("%v: kernels differ after the round trip", st)
		}
		a, _ := PlanJSON(want.Kernels, want.Plan)
		b, _ := PlanJSON(got.Kernels, got.Plan)
		if string(a) != string(b) {
			t.Errorf("%v: launch plans differ after the round trip", st)
		}
		wo, ws := PlanArena(want.Plan)
		gotOffs, gs := PlanArena(got.Plan)
		if ws != gs || !reflect.DeepEqual(wo, gotOffs) {
			t.Errorf("%v: arena %d, read back %d", st, ws, gs)
		}
		if len(got.Plan.Constants) != len(want.Plan.Constants) {
			t.Errorf("%v: %d constants, read back %d", st, len(want.Plan.Constants), len(got.Plan.Constants))
		}
		for id, c := range want.Plan.Constants {
			if g := got.Plan.Constants[id]; g == nil || !reflect.DeepEqual(g.Shape, c.Shape) || g.DType != c.DType ||
				!reflect.DeepEqual(g.F, c.F) || !reflect.DeepEqual(g.I, c.I) {
				t.Errorf("%v: constant %%%d read back as %v", st, id, g)
			}
		}
	}
}

// TestReadProgramRefuses: a kernel file outside kernels/, or a missing one, is an
// error naming it.
func TestReadProgramRefuses(t *testing.T) {
	f, _ := cudatest.Zoo(t, 1)
	prog, err := Build(f, Options{Arch: "compute_80"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteKernels(dir, prog.Kernels, prog.Plan); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "launch_plan.json")
	js, _ := os.ReadFile(plan)
	name := prog.Kernels[0].Name
	bad := strings.Replace(string(js), `"kernels/`+name+`.cu"`, `"../`+name+`.cu"`, 1)
	os.WriteFile(plan, []byte(bad), 0o644)
	if _, err := ReadProgram(dir); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("a kernel file outside kernels/: %v", err)
	}
	// A step naming a buffer the plan does not have is refused, not indexed.
	pf := planFile{LaunchPlan: &LaunchPlan{}}
	if err := json.Unmarshal(js, &pf); err != nil {
		t.Fatal(err)
	}
	pf.Steps[0].Args[0] = 1 << 30
	forged, _ := json.Marshal(pf)
	os.WriteFile(plan, forged, 0o644)
	if _, err := ReadProgram(dir); err == nil || !strings.Contains(err.Error(), "names no buffer") {
		t.Errorf("a step argument out of range: %v", err)
	}
	os.WriteFile(plan, js, 0o644)
	os.Remove(filepath.Join(dir, "kernels", name+".cu"))
	if _, err := ReadProgram(dir); err == nil || !strings.Contains(err.Error(), name+".cu") {
		t.Errorf("a missing kernel file: %v", err)
	}
}
