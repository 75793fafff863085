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
	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/internal/jsonerr"
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

// stepRecord is what lcc compile -o DIR records in DIR/report.json of the step
// it wrote to DIR/graph.lcc, as far as lcc train and compile read it back.
type stepRecord struct {
	path   string
	Mode   string `json:"mode"`
	Target struct {
		Name string `json:"name"`
	} `json:"target"`
	Shapes struct {
		Inputs map[string]struct {
			DType string  `json:"dtype"`
			Shape []int64 `json:"shape"`
		} `json:"inputs"`
	} `json:"shapes"`
	Pipeline []string `json:"pipeline"`
	// Checkpoints is what checkpoint insertion did when the step was compiled.
	Checkpoints *passes.RecomputeStats `json:"checkpoints"`
}

// readStepRecord reads the report.json beside a .lcc model; nil without one.
func readStepRecord(model string) (*stepRecord, error) {
	if model == "" || !strings.EqualFold(filepath.Ext(model), ".lcc") {
		return nil, nil
	}
	path := filepath.Join(filepath.Dir(model), "report.json")
	data, err := userfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, fserr.Cause(err))
	}
	rec := &stepRecord{path: path}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, jsonerr.Describe(path, data, err)
	}
	return rec, nil
}

// RecordedFlag is one flag value a compiled step was compiled with.
type RecordedFlag struct {
	Flag, Value string
}

// RecordedFlags returns the flags that DIR/report.json records for the compiled
// training step model (DIR/graph.lcc), read back from its pipeline, target and
// inputs, in a fixed order, and the report's path; none for another model. The
// step cannot be compiled again, so these are the only values its flags can take.
// Ranks is absent: graph.lcc is always the one-GPU step.
func RecordedFlags(model string) ([]RecordedFlag, string, error) {
	rec, err := readStepRecord(model)
	if err != nil || rec == nil || rec.Mode != "training" || rec.Pipeline == nil {
		return nil, "", err
	}
	var out []RecordedFlag
	add := func(flag, value string) { out = append(out, RecordedFlag{flag, value}) }
	if rec.Target.Name != "" {
		add("target", rec.Target.Name)
	}
	if batch, seq, ok := rec.tokenShape(); ok {
		add("batch", fmt.Sprint(batch))
		add("seq-len", fmt.Sprint(seq))
	}
	attention := "dense"
	theta, scaling := "0", "none" // the flags' defaults: no rescale-rope
	for _, line := range rec.Pipeline {
		name, kv := passLine(line)
		switch name {
		case "rescale-rope":
			theta, scaling = kv["theta"], kv["scaling"]
		case "match-attention":
			add("require-attention", fmt.Sprint(kv["require"] == "true"))
		case "dilate-attention":
			attention = "dilated"
			add("segments", kv["segments"])
			add("dilations", kv["dilations"])
			add("dilated-offsets", kv["offsets"])
		case "insert-loss":
			add("loss", kv["loss"])
		case "insert-checkpoints":
			add("checkpoint", kv["policy"])
			budget := "0" // none given: the target's memory
			if b := kv["budget"]; b != "" {
				budget = b + "B"
			}
			add("memory-budget", budget)
		case "codegen":
			add("precision", map[bool]string{true: "bf16", false: "fp32"}[kv["storage"] == "bf16"])
			add("cuda-graph", map[bool]string{true: "off", false: "on"}[kv["cuda-graph"] == "off"])
		}
	}
	add("attention", attention)
	add("rope-theta", theta)
	add("rope-scaling", scaling)
	return out, rec.path, nil
}

// tokenShape is the [batch, seq] of the step's i64 matrix inputs (token ids,
// labels, masks), when they all have one.
func (r *stepRecord) tokenShape() (batch, seq int64, ok bool) {
	var shape []int64
	for _, in := range r.Shapes.Inputs {
		if in.DType != "i64" || len(in.Shape) != 2 {
			continue
		}
		if shape != nil && !slices.Equal(shape, in.Shape) {
			return 0, 0, false
		}
		shape = in.Shape
	}
	if shape == nil {
		return 0, 0, false
	}
	return shape[0], shape[1], true
}

// passLine splits a pipeline line, `name key=value ...` (Describe's syntax).
func passLine(line string) (string, map[string]string) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", nil
	}
	kv := map[string]string{}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return fields[0], kv
}

// checkRecordedPipeline compares the pipeline the flags ask for with the one
// that compiled a step read from DIR/graph.lcc, as DIR/report.json records it:
// a step cannot be compiled again, so other flags would silently not apply. It
// returns the record (nil without one). A recompile for the GPU found
// (forDevice) generates the kernels for another arch on purpose, so codegen's
// arch is left out of the comparison.
func checkRecordedPipeline(model string, ps []passes.Pass, forDevice bool) (*stepRecord, error) {
	rec, err := readStepRecord(model)
	if err != nil || rec == nil || rec.Pipeline == nil {
		return rec, err
	}
	var want []string
	for _, p := range ps {
		want = append(want, strings.TrimSpace(p.Name+" "+p.Config))
	}
	if !slices.EqualFunc(rec.Pipeline, want, func(a, b string) bool {
		return a == b || forDevice && withoutArch(a) == withoutArch(b)
	}) {
		return nil, fmt.Errorf("%s is a compiled step, and %s records its passes as\n  %s\nbut these flags "+
			"ask for\n  %s\n(pass the flags it was compiled with, or give the model it came from)", model,
			rec.path, strings.Join(rec.Pipeline, "\n  "), strings.Join(want, "\n  "))
	}
	return rec, nil
}

// withoutArch is a pipeline line with codegen's arch=... left out.
func withoutArch(line string) string {
	name, _ := passLine(line)
	if name != "codegen" {
		return line
	}
	var keep []string
	for _, f := range strings.Fields(line) {
		if !strings.HasPrefix(f, "arch=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}
