package cuda

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/internal/jsonerr"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// ReadProgram reads back the program WriteKernels wrote into dir: the launch plan
// and the kernels' launch metadata from launch_plan.json, each kernel's source
// from the .cu file it names, and the constants from constants.safetensors. The
// files are untrusted: it checks their form (a kernel file is kernels/<name>.cu,
// a constant is named for a "const" buffer), and the caller checks they are the
// program it means to run (a folder's manifest and the program hash) before it
// runs them. The folder does not record which kernels each attention node chose
// (Program.Attention), so that stays empty.
func ReadProgram(dir string) (*Program, error) {
	path := filepath.Join(dir, "launch_plan.json")
	js, err := userfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pf := planFile{LaunchPlan: &LaunchPlan{}}
	if err := json.Unmarshal(js, &pf); err != nil {
		return nil, jsonerr.Describe(path, js, err)
	}
	prog := &Program{Plan: pf.LaunchPlan}
	// Never nil, so readConstants and the executor can index it without a check.
	prog.Plan.Constants = map[int]*tensor.Tensor{}
	for _, m := range pf.Kernels {
		// The file name is derived, not trusted: a plan naming "../x.cu" must not make
		// the reader open files outside the folder.
		if m.Name == "" || strings.ContainsAny(m.Name, `/\`) || m.File != "kernels/"+m.Name+".cu" {
			return nil, fmt.Errorf("%s: kernel %q: its file is %q, not kernels/%s.cu", path, m.Name, m.File, m.Name)
		}
		src, err := userfile.ReadFile(filepath.Join(dir, filepath.FromSlash(m.File)))
		if err != nil {
			return nil, err
		}
		prog.Kernels = append(prog.Kernels, Kernel{Name: m.Name, Op: m.Op, Source: string(src), Entry: m.Entry,
			Grid: m.Grid, Block: m.Block, Shared: m.Shared, Params: m.Params, Arch: m.Arch})
	}
	// Check the structure before loading constants, so a malformed plan fails with
	// its own message rather than as a confusing constants error.
	if err := checkPlan(prog); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := readConstants(dir, prog.Plan); err != nil {
		return nil, err
	}
	return prog, nil
}

// checkPlan checks that a plan read from a file is one an executor can walk
// without indexing out of range: buffers numbered by position, aliases and step
// arguments naming buffers, kernel steps naming a kernel with as many arguments
// as it has parameters, and the GEMM or collective of each step that needs one.
func checkPlan(prog *Program) error {
	pl := prog.Plan
	n := len(pl.Buffers)
	inRange := func(id int) bool { return id >= 0 && id < n }
	for i, b := range pl.Buffers {
		if b.ID != i || b.Bytes < 0 {
			return fmt.Errorf("buffer %d: id %d, %d bytes", i, b.ID, b.Bytes)
		}
		if b.Kind == "alias" {
			// An alias chain ends at a buffer that is not one, within n steps.
			id, hops := b.AliasOf, 0
			for ; inRange(id) && pl.Buffers[id].Kind == "alias" && hops < n; hops++ {
				id = pl.Buffers[id].AliasOf
			}
			if !inRange(id) || hops == n {
				return fmt.Errorf("buffer %d: alias of %d, which names no buffer", i, b.AliasOf)
			}
		}
	}
	params := map[string]int{}
	for _, k := range prog.Kernels {
		// Two kernels of one name would make the step → kernel lookup ambiguous.
		if _, dup := params[k.Name]; dup {
			return fmt.Errorf("kernel %s listed twice", k.Name)
		}
		params[k.Name] = len(k.Params)
	}
	for i, st := range pl.Steps {
		for _, a := range st.Args {
			if !inRange(a) {
				return fmt.Errorf("step %d (%s): argument %d names no buffer", i, st.Op, a)
			}
		}
		// Offsets are per argument when present; a shorter list would be read past its end.
		if len(st.Offs) != 0 && len(st.Offs) != len(st.Args) {
			return fmt.Errorf("step %d (%s): %d offsets for %d arguments", i, st.Op, len(st.Offs), len(st.Args))
		}
		var ok bool
		switch st.Kind {
		case "kernel":
			np, known := params[st.Kernel]
			ok = known && np == len(st.Args)
		case "gemm":
			ok = st.Gemm != nil && len(st.Args) >= 3
		// A wait step carries no collective of its own: it waits on the one its
		// arguments name.
		case "collective", "wait":
			ok = (st.Coll != nil || st.Kind == "wait") && len(st.Args) >= 2
		case "d2h", "h2d":
			ok = len(st.Args) >= 2
		}
		// Unknown kinds are refused too: a newer lcc's plan must not be half-run by an
		// older executor.
		if !ok {
			return fmt.Errorf("step %d: a %q step (op %s, kernel %q, %d arguments) that no executor runs",
				i, st.Kind, st.Op, st.Kernel, len(st.Args))
		}
	}
	for _, o := range pl.Outputs {
		if !inRange(o.ID) {
			return fmt.Errorf("output %q names no buffer", o.Name)
		}
	}
	return nil
}

// readConstants loads constants.safetensors, when the plan has "const" buffers,
// into plan.Constants by buffer id.
func readConstants(dir string, plan *LaunchPlan) error {
	path := filepath.Join(dir, "constants.safetensors")
	f, err := safetensors.Read(path)
	// WriteKernels writes no file for a plan without constants, so absence is
	// fine unless a buffer needs one.
	if errors.Is(err, fs.ErrNotExist) {
		for _, b := range plan.Buffers {
			if b.Kind == "const" {
				return fmt.Errorf("%s: missing, and buffer %%%d is a constant", path, b.ID)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range f.Names {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "%"))
		if err != nil || !strings.HasPrefix(name, "%") || id < 0 || id >= len(plan.Buffers) ||
			// Only "const" buffers may be filled from the file, so a crafted constants file
			// cannot overwrite inputs or weights.
			plan.Buffers[id].Kind != "const" {
			return fmt.Errorf("%s: tensor %q names no constant buffer of the plan", path, name)
		}
		plan.Constants[id] = f.Tensors[name]
	}
	return nil
}
