package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
)

// ProgramHash identifies a compiled program: "sha256:" and the SHA-256 of the
// final IR's text form, every kernel's name and source, the launch plan (as
// launch_plan.json holds it) and the arena layout the executor allocates
// (codegen.PlanArena, which the executor allocates: each buffer's offset and the arena's size). Two runs with the
// same hash run the same kernels in the same order on the same memory layout.
// Weight values are not hashed: they are the program's inputs. Without a
// program (a CPU target) the hash covers the IR alone.
func ProgramHash(f *ir.Func, prog *cudagen.Program) string {
	h := sha256.New()
	io.WriteString(h, "lcc program v1\nir\n")
	io.WriteString(h, ir.Print(f))
	if prog != nil && prog.Plan != nil {
		for _, k := range prog.Kernels {
			fmt.Fprintf(h, "kernel %s %d\n", k.Name, len(k.Source))
			io.WriteString(h, k.Source)
		}
		js, err := cudagen.PlanJSON(prog.Kernels, prog.Plan)
		if err != nil {
			panic("lcc: BUG: launch plan does not encode: " + err.Error())
		}
		io.WriteString(h, "plan\n")
		h.Write(js)
		offs, size := cudagen.PlanArena(prog.Plan)
		fmt.Fprintf(h, "arena %d %v\n", size, offs)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// CompiledStep reports whether f is already a training step, as lcc compile
// writes one to DIR/graph.lcc: it has a gradient output "grad.<weight>". loss is
// the loss among its other outputs, by package loss's rules ("" when none
// qualifies).
func CompiledStep(f *ir.Func) (lossName string, ok bool) {
	rest := &ir.Func{Name: f.Name}
	for _, o := range f.Outputs {
		if name, isGrad := strings.CutPrefix(o.Name, autodiff.GradPrefix); isGrad {
			if p := f.Param(name); p != nil && p.Role == ir.RoleWeight {
				ok = true
				continue
			}
		}
		rest.Outputs = append(rest.Outputs, o)
	}
	if ok {
		lossName, _ = loss.ModelLoss(rest)
	}
	return lossName, ok
}

// checkRecordedPipeline compares the pipeline the flags ask for with the one
// that compiled a step read from DIR/graph.lcc, as DIR/report.json records it:
// a step cannot be compiled again, so other flags would silently not apply.
func checkRecordedPipeline(model string, ps []passes.Pass) error {
	if model == "" || !strings.EqualFold(filepath.Ext(model), ".lcc") {
		return nil
	}
	path := filepath.Join(filepath.Dir(model), "report.json")
	data, err := userfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec struct {
		Pipeline []string `json:"pipeline"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if rec.Pipeline == nil {
		return nil
	}
	var want []string
	for _, p := range ps {
		want = append(want, strings.TrimSpace(p.Name+" "+p.Config))
	}
	if !slices.Equal(rec.Pipeline, want) {
		return fmt.Errorf("%s is a compiled step, and %s records its passes as\n  %s\nbut these flags "+
			"ask for\n  %s\n(pass the flags it was compiled with, or give the model it came from)", model,
			path, strings.Join(rec.Pipeline, "\n  "), strings.Join(want, "\n  "))
	}
	return nil
}
