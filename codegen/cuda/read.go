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
	prog.Plan.Constants = map[int]*tensor.Tensor{}
	for _, m := range pf.Kernels {
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
	if err := readConstants(dir, prog.Plan); err != nil {
		return nil, err
	}
	return prog, nil
}

// readConstants loads constants.safetensors, when the plan has "const" buffers,
// into plan.Constants by buffer id.
func readConstants(dir string, plan *LaunchPlan) error {
	path := filepath.Join(dir, "constants.safetensors")
	f, err := safetensors.Read(path)
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
			plan.Buffers[id].Kind != "const" {
			return fmt.Errorf("%s: tensor %q names no constant buffer of the plan", path, name)
		}
		plan.Constants[id] = f.Tensors[name]
	}
	return nil
}
