package train

import (
	"fmt"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
)

// RecompileFlag is the lcc train flag that asks for a step compiled for the GPU
// found rather than for --target's architecture.
const RecompileFlag = "--recompile-for-device"

// forDevice decides how the step compiled for target, whose program is prog,
// runs on gpu. The arch is the target's (issue #22): a program gpu can run runs
// as it is, under the hash lcc compile reports for target, and one it cannot
// run is refused, naming the flag that recompiles it. Only when recompile (the
// flag) is set does the step get compiled again, for the returned target: target
// with gpu's codegen arch, every other property kept. A gpu of the target's own
// arch needs no recompile, flag or not.
//
// It is a pure function of its arguments, so the decision and its message are
// tested without a GPU; the trainer calls it before the session adopts prog.
func forDevice(target targets.Target, prog *cudagen.Program, gpu exec.GPU,
	recompile bool) (retarget *targets.Target, err error) {
	if prog == nil || gpu.Arch == "" {
		return nil, nil // no GPU program, or no GPU to match: nothing to decide
	}
	if recompile && target.Arch != gpu.CodegenArch {
		t, err := target.WithArch(gpu.CodegenArch)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", RecompileFlag, err)
		}
		return &t, nil
	}
	if err := gpu.Runs(prog); err != nil {
		return nil, fmt.Errorf("--target=%s: %w; pass %s to compile the step for this GPU (%s, a new "+
			"program hash), or give a --target of this GPU (lcc targets)", target.Name, err, RecompileFlag,
			gpu.CodegenArch)
	}
	return nil, nil
}

// recompiledLine is what lcc train prints after a recompile for the device: the
// new program hash, which the run then reports, beside the one lcc compile
// reports for the target. A compiled folder's step (folder) was the program the
// folder holds; its graph is what was compiled again.
func recompiledLine(model string, folder bool, gpu exec.GPU, target targets.Target, was, now string) string {
	from := ""
	if folder {
		from = " " + model + "'s step"
	}
	return fmt.Sprintf("recompiled%s for %s (%s): program %s (was %s for %s)", from, gpu.CodegenArch,
		gpu.Name, now, was, target.Name)
}

// adoptStep hands step's program to the executor (cfg.Adopt) after forDevice
// decided how it runs on cfg.GPU; with a recompile it compiles spare, an
// untouched copy of the loaded model, for the GPU's arch and returns that step.
func adoptStep(cfg Config, step *driver.Result, spare *ir.Func) (*driver.Result, error) {
	if cfg.Adopt == nil || step.Program == nil {
		return step, nil
	}
	retarget, err := forDevice(cfg.Target, step.Program, cfg.GPU, cfg.RecompileForDevice)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	if retarget != nil {
		_, folder := driver.CompiledStep(spare)
		o := cfg.compileOptions()
		o.Target, o.ForDevice = *retarget, true
		again, err := compileStep(cfg, spare, o)
		if err != nil {
			return nil, err
		}
		if cfg.Progress != nil {
			line := recompiledLine(cfg.Model, folder, cfg.GPU, cfg.Target, step.Hash, again.Hash)
			fmt.Fprintln(cfg.Progress, line)
		}
		step = again
	}
	if err := cfg.Adopt(step.Func, step.Program); err != nil {
		return nil, fmt.Errorf("%s (--target=%s): %w", cfg.Model, cfg.Target.Name, err)
	}
	return step, nil
}
