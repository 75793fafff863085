package driver

import (
	"fmt"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// storedAs returns, for f built by codegen/cuda with storage dt (tensor.BF16),
// the dtype in which the device stores each value of f (storedIn); nil (every
// value as itself) for f32 storage.
func storedAs(f *ir.Func, dt tensor.DType) (func(*ir.Value) tensor.DType, error) {
	if dt == tensor.F32 || dt == tensor.Invalid {
		return nil, nil
	}
	prog, err := buildFor(f, dt)
	if err != nil {
		return nil, err
	}
	return storedIn(f, prog)
}

// buildFor is f's program for an sm_80 GPU with storage dt: what the CPU
// emulates when it is not told which program a device ran.
func buildFor(f *ir.Func, dt tensor.DType) (*cudagen.Program, error) {
	prog, err := cudagen.Build(f, cudagen.Options{Arch: "compute_80", Storage: dt})
	if err != nil {
		return nil, fmt.Errorf("%v storage as on the GPU: %w", dt, err)
	}
	return prog, nil
}

// storedIn returns the dtype in which prog, f's program, stores each value of f:
// the buffer's dtype for every value a launch of the plan reads or writes and
// every output, f32 otherwise (values that live only in the registers of a fused
// kernel: an elementwise run's inner values, recomputed values, inlined
// literals). It is interp's Options.Store, so that the CPU interpreter rounds
// exactly what the device stores and a bf16 check compares the device with it
// (CheckOptions). A value codegen places in another's buffer (a concat's operand
// written in place, a slice read in place: view.go) is rounded where that buffer
// is, at the concat or at the slice's source. Math and accumulation are fp32 on
// the device and float64 on the CPU; the roundings inside the tensor-core
// attention kernels are emulation's other half (flashRoundings).
func storedIn(f *ir.Func, prog *cudagen.Program) (func(*ir.Value) tensor.DType, error) {
	pl := prog.Plan
	touched := map[int]bool{}
	for _, s := range pl.Steps {
		for _, a := range s.Args {
			touched[a] = true
		}
	}
	for _, o := range pl.Outputs {
		touched[o.ID] = true
	}
	// Buffer ids number f's parameters, then its nodes' results in body order
	// (ir.Print's numbering); scratch buffers come after them.
	var values []*ir.Value
	for _, p := range f.Params {
		values = append(values, p.Value)
	}
	for _, n := range f.Body {
		values = append(values, n.Results...)
	}
	stored := make(map[*ir.Value]tensor.DType, len(values))
	for id, v := range values {
		b := pl.Buffers[id]
		if b.ID != id {
			return nil, fmt.Errorf("lcc: BUG: codegen buffer %d has id %d", id, b.ID)
		}
		if b.Kind == "inline" || !touched[id] && !(b.Kind == "alias" && touched[b.AliasOf]) {
			continue
		}
		bdt, err := tensor.ParseDType(b.DType)
		if err != nil {
			return nil, fmt.Errorf("lcc: BUG: codegen buffer %d: %w", id, err)
		}
		stored[v] = bdt
	}
	return func(v *ir.Value) tensor.DType {
		if dt, ok := stored[v]; ok {
			return dt
		}
		return v.Type.DType
	}, nil
}
