package passes

import (
	"math"
	"path/filepath"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// TestFuseZoo runs fuse on every function of the golden files (the zoo of
// graphs the other passes are tested on) and requires the CPU interpreter to
// compute bit for bit the same outputs before and after, in f32 as a step
// runs, and the printed IR to parse back to itself.
func TestFuseZoo(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*", "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no test files (%v)", err)
	}
	fused := 0
	for _, path := range paths {
		ar, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range ar.Files {
			if file.Name != "in.lcc" {
				continue
			}
			f, err := ir.Parse(string(file.Data))
			if err != nil {
				continue // an error case's input
			}
			g := f.Clone()
			res, err := Fuse(g, FuseConfig{})
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if len(res.Groups) == 0 {
				continue
			}
			fused++
			if res.NodesAfter >= res.NodesBefore {
				t.Errorf("%s: %d nodes after fuse, %d before", path, res.NodesAfter, res.NodesBefore)
			}
			if text := ir.Print(g); !printsBackTo(text) {
				t.Errorf("%s: the fused IR does not print back to itself:\n%s", path, text)
			}
			requireSameRun(t, path, f, g, randomInputs(f, 7, 3))
		}
	}
	if fused < 5 {
		t.Errorf("fuse fused only %d of the zoo's functions", fused)
	}
}

// printsBackTo says whether text parses and prints back to itself.
func printsBackTo(text string) bool {
	f, err := ir.Parse(text)
	return err == nil && ir.Print(f) == text
}

// requireSameRun runs before and after on in (f32) and fails t unless every
// output is bit for bit the same (NaNs equal).
func requireSameRun(t *testing.T, what string, before, after *ir.Func, in map[string]*tensor.Tensor) {
	t.Helper()
	want, errW := interp.Run(before, in, interp.Options{})
	got, errG := interp.Run(after, in, interp.Options{})
	if (errW == nil) != (errG == nil) {
		t.Fatalf("%s: before: %v, after: %v", what, errW, errG)
	}
	if errW != nil {
		return // both refuse the inputs (an integer index out of range): nothing to compare
	}
	for name, w := range want {
		if d := firstDiff(got[name], w); d >= 0 {
			t.Errorf("%s: output %q differs at element %d after fuse", what, name, d)
		}
	}
}

// firstDiff is the first element where a and b differ in bits (-1: none).
func firstDiff(a, b *tensor.Tensor) int {
	if a == nil || a.DType != b.DType || len(a.F) != len(b.F) || len(a.I) != len(b.I) {
		return 0
	}
	for i := range b.F {
		if math.Float64bits(a.F[i]) != math.Float64bits(b.F[i]) && !(a.F[i] != a.F[i] && b.F[i] != b.F[i]) {
			return i
		}
	}
	for i := range b.I {
		if a.I[i] != b.I[i] {
			return i
		}
	}
	return -1
}

// TestFuseMaxOps checks that max-ops bounds every group, and that a group
// never reads a value that depends on it (the fused IR verifies).
func TestFuseMaxOps(t *testing.T) {
	f, err := ir.Parse(`func @f(
    %0: f32[4,8] input "x",
) {
  %1 = exp(%0) : f32[4,8]
  %2 = neg(%1) : f32[4,8]
  %3 = tanh(%2) : f32[4,8]
  %4 = sigmoid(%3) : f32[4,8]
  %5 = abs(%4) : f32[4,8]
  return %5 "y"
}
`)
	if err != nil {
		t.Fatal(err)
	}
	g := f.Clone()
	res, err := Fuse(g, FuseConfig{MaxOps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 2 || len(res.Groups[0].Ops) != 2 || len(res.Groups[1].Ops) != 2 {
		t.Errorf("max-ops=2 made groups %+v, want two of two ops (and abs alone)", res.Groups)
	}
	requireSameRun(t, "chain", f, g, randomInputs(f, 7, 1))
}

// TestFuseDeterministic fuses the same function twice and requires the same
// bytes.
func TestFuseDeterministic(t *testing.T) {
	ar, err := txtar.ParseFile(filepath.Join("testdata", "fuse", "stops.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for range 2 {
		f, err := ir.Parse(string(ar.Files[0].Data))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Fuse(f, FuseConfig{}); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, ir.Print(f))
	}
	if texts[0] != texts[1] {
		t.Errorf("two fuses of one function differ:\n%s\n%s", texts[0], texts[1])
	}
}
