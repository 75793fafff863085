package cuda

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// planFile is launch_plan.json: the plan plus the kernels' launch metadata, so
// an executor needs nothing else besides the .cu files and the constants.
type planFile struct {
	*LaunchPlan
	Kernels []kernelMeta `json:"kernels"`
}

// kernelMeta is one kernel's entry in launch_plan.json: what a launcher needs
// to load the .cu file's entry point and launch it without re-deriving anything.
type kernelMeta struct {
	Name   string    `json:"name"`
	Op     string    `json:"op"`
	File   string    `json:"file"`
	Entry  string    `json:"entry"`
	Grid   [3]uint32 `json:"grid"`
	Block  [3]uint32 `json:"block"`
	Shared uint32    `json:"shared,omitempty"`
	Params []Param   `json:"params"`
	Arch   string    `json:"arch,omitempty"` // Kernel.Arch
}

// PlanJSON renders the plan and the kernels' metadata as indented JSON; equal
// inputs give equal bytes.
func PlanJSON(ks []Kernel, plan *LaunchPlan) ([]byte, error) {
	pf := planFile{LaunchPlan: plan}
	for _, k := range ks {
		// Paths are relative to the output folder so the folder can be moved whole.
		pf.Kernels = append(pf.Kernels, kernelMeta{Name: k.Name, Op: k.Op, File: "kernels/" + k.Name + ".cu",
			Entry: k.Entry, Grid: k.Grid, Block: k.Block, Shared: k.Shared, Params: k.Params, Arch: k.Arch})
	}
	var buf bytes.Buffer
	// Indented so that a diff of two compiles' plans reads line by line; equal
	// plans encode to equal bytes, since every slice is in plan order.
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(pf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteKernels writes DIR/kernels/<name>.cu for every kernel, DIR/launch_plan.json
// and, when the plan has constants, DIR/constants.safetensors (tensor "%<id>" for
// buffer id). Files are written through temporary names and renamed. It is what
// `lcc compile -o DIR` calls after Build.
func WriteKernels(dir string, ks []Kernel, plan *LaunchPlan) error {
	if plan == nil {
		return fmt.Errorf("codegen/cuda: WriteKernels %s: nil plan", dir)
	}
	kdir := filepath.Join(dir, "kernels")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		return fmt.Errorf("codegen/cuda: -o %s: %w", dir, err)
	}
	for _, k := range ks {
		// Atomic writes: an interrupted compile leaves old or new files, never a
		// truncated kernel that a later run would fail to compile.
		if err := atomicfile.WriteFile(filepath.Join(kdir, k.Name+".cu"), []byte(k.Source), 0o644); err != nil {
			return fmt.Errorf("codegen/cuda: %w", err)
		}
	}
	// The plan is written after the kernels it names, so that a plan on disk
	// never names a kernel file that is not yet there.
	js, err := PlanJSON(ks, plan)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "launch_plan.json"), js, 0o644); err != nil {
		return fmt.Errorf("codegen/cuda: %w", err)
	}
	// No empty constants file: its absence tells the executor there is nothing to upload.
	if len(plan.Constants) == 0 {
		return nil
	}
	data, err := ConstantsSafetensors(plan)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "constants.safetensors"), data, 0o644); err != nil {
		return fmt.Errorf("codegen/cuda: %w", err)
	}
	return nil
}

// ConstantsSafetensors encodes the plan's constants, named "%<id>".
func ConstantsSafetensors(plan *LaunchPlan) ([]byte, error) {
	ts := map[string]*tensor.Tensor{}
	var names []string
	// Named by buffer id, the key the plan's steps use: the executor uploads
	// constant %<id> into buffer id.
	for id, t := range plan.Constants {
		name := fmt.Sprintf("%%%d", id)
		ts[name] = t
		names = append(names, name)
	}
	// Sorted so equal plans encode to equal bytes (map order is random).
	sort.Strings(names)
	return safetensors.Encode(names, ts, map[string]string{"format": "lcc-constants"})
}
